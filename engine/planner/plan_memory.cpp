// See plan_memory.hpp.
#include "engine/planner/plan_memory.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "engine/run_plan/memory_plan.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {

std::vector<double> probabilities_saved(const run_plan::Plan& plan, const PlanChoice& choice, const SearchOptions& options,
                                        DType dtype) {
  std::vector<double> saved(static_cast<std::size_t>(plan.num_stages()), 0.0);
  if (choice.recompute != partition::Recompute::kNone) return saved;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    for (int b = range.begin; b < range.end; ++b) {
      saved[static_cast<std::size_t>(s)] +=
          partition::attention_probabilities_work(plan.spec.blocks[static_cast<std::size_t>(b)], dtype, options.attention,
                                                  choice.tp, choice.micro_batch).saved_bytes / choice.cp;
    }
  }
  return saved;
}


std::vector<std::int64_t> estimate_memory(const run_plan::Plan& plan, const config::RunConfig& config,
                                          const PlanChoice& choice, const SearchOptions& opts, PlanEstimate& est,
                                          PlanDetails* details) {
  std::vector<std::int64_t> working_set(static_cast<std::size_t>(choice.pp), 0);
  for (int r = 0; r < choice.pp; ++r) {
    // A run storing attention probabilities keeps them with every micro-batch's stash: the memory plan counts them
    // in each attention block's (its `attention` input), so the walk and cp's transients above it are the run's.
    const run_plan::MemoryPlan memory =
        run_plan::estimate_rank_memory(plan, config, r, opts.ep_imbalance, opts.attention);
    working_set[static_cast<std::size_t>(r)] =
        memory.total() - memory.bytes[static_cast<std::size_t>(MemoryCategory::kOptimizerState)];
    // The host line (PlanEstimate::host_pinned_bytes), on the planned device (0 on the CPU).
    const std::int64_t host_pinned = memory.host_pinned;
    if (details) {
      details->memory_plan.push_back(memory.bytes);
      details->cp_exchange.push_back(memory.cp_exchange);
      details->host_pinned.push_back(host_pinned);
    }
    if (host_pinned > est.host_pinned_bytes) {
      est.host_pinned_bytes = host_pinned;
      est.host_pinned_rank = r;
    }
    if (memory.total() > est.peak_bytes) {
      est.peak_bytes = memory.total();
      est.peak_rank = r;
      est.peak_by_category = memory.bytes;
    }
  }
  return working_set;
}


void check_fit(std::int64_t cap, PlanEstimate& est) {
  est.fits = cap == 0 || est.peak_bytes <= cap;
  if (!est.fits) {
    est.reason = fmt::format("pp rank {} needs {} > cap {}", est.peak_rank, format_bytes(est.peak_bytes), format_bytes(cap));
  }
}


void memory_over_step(const run_plan::Plan& plan, const PlanChoice& choice, bool bf16, double step_s,
                      const std::vector<double>& saved, PlanDetails& details) {
  const pipeline::SimulationResult& result = details.simulated;
  const int num_stages = plan.num_stages();
  // Memory over the step per pp rank: static categories plus the activations the timeline holds.
  // A cp rank holds its T / cp tokens of every micro-batch's stash (the memory plan divides the same way).
  const double per_micro = static_cast<double>(choice.micro_batch) / (bf16 ? 2.0 : 1.0) / choice.cp;
  // One tp rank's activations (the cost model's tp layout), as the memory plan counts them.
  const auto shard = partition::model_costs(plan.spec, DType::kF32, choice.recompute, choice.tp);
  std::vector<run_plan::StageBackwardMemory> stage_memory;
  for (int s = 0; s < num_stages; ++s) {
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    stage_memory.push_back(run_plan::stage_backward_memory(
        std::vector<partition::BlockCost>(shard.begin() + range.begin, shard.begin() + range.end)));
  }
  for (std::size_t r = 0; r < result.timeline.ranks.size(); ++r) {
    const auto& plan_bytes = details.memory_plan[r];
    std::int64_t fixed = 0;
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      if (c != static_cast<int>(MemoryCategory::kActivations) && c != static_cast<int>(MemoryCategory::kWorkspace)) {
        fixed += plan_bytes[static_cast<std::size_t>(c)];
      }
    }
    std::vector<std::pair<double, double>> events;  // (time, delta bytes)
    for (const auto& a : result.timeline.ranks[r]) {
      if (a.action.stage < 0) continue;
      const run_plan::StageBackwardMemory& sm = stage_memory[static_cast<std::size_t>(a.action.stage)];
      const double act = static_cast<double>(sm.forward_stash) * per_micro + saved[static_cast<std::size_t>(a.action.stage)];
      const double held_for_w = static_cast<double>(sm.weight_stash) * per_micro;
      switch (a.action.kind) {
        case pipeline::ActionKind::kForward: events.push_back({a.start, act}); break;
        case pipeline::ActionKind::kBackwardInput: {  // each block's backward holds its extra while it runs
          const double extra = static_cast<double>(sm.input_peak) * per_micro;
          events.push_back({a.start, extra});
          events.push_back({a.end, held_for_w - act - extra});
          break;
        }
        case pipeline::ActionKind::kBackwardWeight: events.push_back({a.end, -held_for_w}); break;
        case pipeline::ActionKind::kBackward: {
          const double extra = static_cast<double>(sm.fused_peak) * per_micro;
          events.push_back({a.start, extra});
          events.push_back({a.end, -act - extra});
          break;
        }
        default: break;
      }
    }
    std::stable_sort(events.begin(), events.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<MemoryPoint> line = {{0.0, fixed}};
    double live = 0;
    std::int64_t peak = fixed;
    for (const auto& [time, delta] : events) {
      live += delta;
      const std::int64_t bytes = fixed + static_cast<std::int64_t>(std::max(0.0, live));
      line.push_back({time, bytes});
      peak = std::max(peak, bytes);
    }
    line.push_back({step_s, fixed});
    details.memory_timeline.push_back(std::move(line));
    details.timeline_peak.push_back(peak);
  }
}

}  // namespace cleave::planner
