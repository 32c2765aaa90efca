// See host_memory.hpp.
#include "engine/run_plan/host_memory.hpp"

#include <algorithm>
#include <vector>

#include "partition/families/moe_staging.hpp"
#include "pipeline/action.hpp"

namespace cleave::run_plan {
namespace {

// One stage's staging per micro-batch: held from F to I (or B), and how far above what was held at the action's
// start its F and its I or B go.
struct StageStaging {
  std::int64_t held = 0, forward_peak = 0, backward_peak = 0;
};

StageStaging stage_staging(const Plan& plan, int stage, std::int64_t micro, int cp, int ep, bool full_recompute) {
  StageStaging s;
  const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
  for (int b = range.begin; b < range.end; ++b) {
    const partition::MoeUploadStaging x =
        partition::moe_upload_staging(plan.spec.blocks[static_cast<std::size_t>(b)], micro, cp, ep);
    if (full_recompute) {  // the first forward waits for its uploads before it dispatches
      s.forward_peak = std::max({s.forward_peak, x.uploads, x.dispatch});
      s.backward_peak = std::max(s.backward_peak, x.held() + x.dispatch);
    } else {
      s.forward_peak = std::max(s.forward_peak, s.held + x.held() + x.dispatch);
      s.held += x.held();
    }
  }
  s.forward_peak = std::max(s.forward_peak, s.held);
  return s;
}

}  // namespace

std::int64_t host_pinned_peak(const Plan& plan, const config::RunConfig& config, int pp_rank) {
  const std::int64_t micro = config.resolved_batch().micro_batch_size;
  const int cp = std::max(1, config.parallel.context_parallel_size);
  const int ep = std::max(1, config.parallel.expert_model_parallel_size);
  const bool full = config.train.recompute == partition::Recompute::kFull;
  std::vector<StageStaging> stages(static_cast<std::size_t>(plan.num_stages()));
  bool any = false;
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    stages[static_cast<std::size_t>(stage)] = stage_staging(plan, stage, micro, cp, ep, full);
    any = any || stages[static_cast<std::size_t>(stage)].forward_peak > 0;
  }
  if (!any) return 0;
  std::int64_t held = 0, peak = 0;
  for (const auto& a : plan.schedule.ranks[static_cast<std::size_t>(pp_rank)]) {
    if (a.stage < 0 || !pipeline::is_compute(a.kind)) continue;
    const StageStaging& s = stages[static_cast<std::size_t>(a.stage)];
    switch (a.kind) {
      case pipeline::ActionKind::kForward:
        peak = std::max(peak, held + s.forward_peak);
        held += s.held;
        break;
      case pipeline::ActionKind::kBackwardInput:
      case pipeline::ActionKind::kBackward:
        peak = std::max(peak, held + s.backward_peak);
        held -= s.held;
        break;
      default: break;
    }
  }
  return peak;
}

}  // namespace cleave::run_plan
