// See host_memory.hpp.
#include "engine/run_plan/host_memory.hpp"

#include <algorithm>
#include <vector>

#include "engine/core/dtype.hpp"
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

// The walk: the moe staging, and with `batches` each micro-batch's staged batch (host_pinned_peak).
std::int64_t walk_peak(const Plan& plan, const config::RunConfig& config, int pp_rank, bool batches) {
  const std::int64_t micro = config.resolved_batch().micro_batch_size;
  const int cp = std::max(1, config.parallel.context_parallel_size);
  const int ep = std::max(1, config.parallel.expert_model_parallel_size);
  const bool full = config.train.recompute == partition::Recompute::kFull;
  const int last = plan.num_stages() - 1;
  std::vector<StageStaging> stages(static_cast<std::size_t>(plan.num_stages()));
  bool any = false;
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    stages[static_cast<std::size_t>(stage)] = stage_staging(plan, stage, micro, cp, ep, full);
    any = any || stages[static_cast<std::size_t>(stage)].forward_peak > 0;
    any = any || (batches && (stage == 0 || stage == last));
  }
  if (!any) return 0;
  // A micro-batch's batch, and while its F shards it under cp the source's unsharded batch beside the shard.
  const std::int64_t batch = microbatch_upload_bytes(plan.spec, micro, cp);
  const std::int64_t unsharded = cp > 1 ? microbatch_upload_bytes(plan.spec, micro, 1) : 0;
  std::vector<bool> loaded(static_cast<std::size_t>(std::max(0, plan.schedule.num_microbatches)), false);
  std::int64_t held = 0, peak = 0;
  for (const auto& a : plan.schedule.ranks[static_cast<std::size_t>(pp_rank)]) {
    if (a.stage < 0 || !pipeline::is_compute(a.kind)) continue;
    const StageStaging& s = stages[static_cast<std::size_t>(a.stage)];
    switch (a.kind) {
      case pipeline::ActionKind::kForward:
        if (batches && (a.stage == 0 || a.stage == last) && a.microbatch >= 0 &&
            a.microbatch < static_cast<int>(loaded.size()) && !loaded[static_cast<std::size_t>(a.microbatch)]) {
          loaded[static_cast<std::size_t>(a.microbatch)] = true;
          held += batch;  // kept until the step's end
          peak = std::max(peak, held + unsharded);
        }
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

}  // namespace

std::int64_t microbatch_upload_bytes(const partition::ModelSpec& spec, std::int64_t micro, int cp) {
  const std::int64_t inputs = spec.sample_input().numel() * static_cast<std::int64_t>(dtype_size(spec.input_dtype()));
  const std::int64_t targets = 4 * spec.blocks.back().input.rows();  // i32, one per row of the loss's input
  return micro * (inputs + targets) / std::max(1, cp);
}

std::int64_t losses_row_bytes(const config::RunConfig& config) {
  const config::ResolvedBatch b = config.resolved_batch();
  return 4 * (b.global_batch_size / b.micro_batch_size) * std::max(1, config.parallel.context_parallel_size);
}

std::int64_t moe_staging_peak(const Plan& plan, const config::RunConfig& config, int pp_rank) {
  return walk_peak(plan, config, pp_rank, false);
}

std::int64_t host_pinned_peak(const Plan& plan, const config::RunConfig& config, int pp_rank) {
  return walk_peak(plan, config, pp_rank, true) + losses_row_bytes(config);
}

}  // namespace cleave::run_plan
