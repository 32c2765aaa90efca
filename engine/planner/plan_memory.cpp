// See plan_memory.hpp.
#include "engine/planner/plan_memory.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "engine/run_plan/memory_plan.hpp"
#include "partition/block_work.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {

run_plan::CpuKernels planned_cpu_kernels(const config::RunConfig& config, const HardwareProfile& profile, int world) {
  run_plan::CpuKernels cpu = run_plan::unresolved_cpu_kernels(config);
  if (config.device.type != DeviceType::kCpu || profile.cores_per_node <= 0) return cpu;
  const int ranks_on_node = std::min(world, std::max(1, profile.ranks_per_node));
  cpu.threads = std::max(1, static_cast<int>(profile.cores_per_rank(ranks_on_node)));
  return cpu;
}

std::vector<std::int64_t> estimate_memory(const run_plan::Plan& plan, const config::RunConfig& config,
                                          const PlanChoice& choice, const SearchOptions& opts,
                                          const run_plan::CpuKernels& cpu, PlanEstimate& est, PlanDetails* details) {
  std::vector<std::int64_t> working_set(static_cast<std::size_t>(choice.pp), 0);
  for (int r = 0; r < choice.pp; ++r) {
    // A run storing attention probabilities keeps them with every micro-batch's stash: the memory plan counts them
    // in each attention block's (its `attention` input), so the walk and cp's transients above it are the run's.
    const run_plan::MemoryPlan memory =
        run_plan::estimate_rank_memory(plan, config, r, cpu, opts.ep_memory, opts.attention);
    // The working set is a time input (a measured profile's warm tables): at the time model's ep imbalance (opts'
    // is resolved, with_ep_imbalance), not at the memory plan's bound.
    const run_plan::MemoryPlan timed =
        choice.ep > 1 ? run_plan::estimate_rank_memory(plan, config, r, cpu, opts.ep_imbalance, opts.attention)
                      : memory;
    working_set[static_cast<std::size_t>(r)] =
        timed.total() - timed.bytes[static_cast<std::size_t>(MemoryCategory::kOptimizerState)];
    // The host line (PlanEstimate::host_pinned_bytes), on the planned device (0 on the CPU).
    const std::int64_t host_pinned = memory.host_pinned;
    if (details) {
      details->memory_plan.push_back(memory.bytes);
      details->memory_total.push_back(memory.total());
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


void memory_over_step(const run_plan::Plan& plan, const config::RunConfig& config, const SearchOptions& opts,
                      const run_plan::CpuKernels& cpu, double step_s, PlanDetails& details) {
  const pipeline::SimulationResult& result = details.simulated;
  for (std::size_t r = 0; r < result.timeline.ranks.size(); ++r) {
    // The memory plan's own stage summaries and what its total holds beside the activation walk.
    const run_plan::RankStageMemory rm =
        run_plan::rank_stage_memory(plan, config, static_cast<int>(r), cpu, opts.ep_memory, opts.attention);
    const std::int64_t fixed = rm.outside_walk;
    // How far above its start an action goes while it runs: its blocks' backward (or forward) peak, or an attention
    // block's transient buffers on top of what the action holds then.
    const auto rise = [&rm](std::int64_t peak, const std::vector<run_plan::StagePhase>& phases) {
      double top = rm.bytes(peak);
      for (const auto& p : phases) top = std::max(top, rm.bytes(p.held) + static_cast<double>(p.bytes));
      return top;
    };
    std::vector<std::pair<double, double>> events;  // (time, delta bytes)
    for (const auto& a : result.timeline.ranks[r]) {
      if (a.action.stage < 0) continue;
      const auto st = static_cast<std::size_t>(a.action.stage);
      if (st >= rm.stages.size()) continue;
      const run_plan::StageBackwardMemory& sm = rm.stages[st];
      const double act = rm.bytes(sm.forward_stash);
      const double held_for_w = rm.bytes(sm.weight_stash);
      switch (a.action.kind) {
        case pipeline::ActionKind::kForward: {  // the stash, and the transients of its attention blocks above it
          const double top = rise(sm.forward_stash, sm.forward_transients);
          events.push_back({a.start, top});
          events.push_back({a.end, act - top});
          break;
        }
        case pipeline::ActionKind::kBackwardInput: {  // each block's backward holds its extra while it runs
          const double top = rise(sm.input_peak, sm.input_transients);
          events.push_back({a.start, top});
          events.push_back({a.end, held_for_w - act - top});
          break;
        }
        case pipeline::ActionKind::kBackwardWeight: {
          const double top = rm.bytes(sm.weight_peak);
          events.push_back({a.start, top});
          events.push_back({a.end, -held_for_w - top});
          break;
        }
        case pipeline::ActionKind::kBackward: {
          const double top = rise(sm.fused_peak, sm.fused_transients);
          events.push_back({a.start, top});
          events.push_back({a.end, -act - top});
          break;
        }
        default: break;
      }
    }
    // At one moment an action's end comes before the next one's start (both rank-local, in order).
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
