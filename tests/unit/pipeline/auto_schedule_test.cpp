// The automatic zero-bubble scheduler (pipeline/schedules/auto_schedule.hpp):
//   - over p 2..8, m 1..4p at the memory limits p (1F1B's / ZB-H1's) and 2p − 1 (ZB-H2's), with F = I = W = 1:
//     the validator accepts the schedule (compute and lowered), every rank stays within the limit, its own
//     timing equals simulate()'s, and it is never slower than ZB-H1 (limit p) / ZB-H2 (limit 2p − 1), already
//     with the greedy construction alone (before the handcrafted schedules join as seeds); at
//     2p − 1 with m >= 2p − 1 it reaches ZB-H2's bubble (no stage bubble; bubble_fraction (p − 1)/(3m + p − 1));
//   - tight limits below p (1, 2, p − 1) still give valid schedules within the limit, and more memory never
//     makes the result slower on these cases;
//   - unequal costs and P2P latency: never slower than ZB-H1 at limit p;
//   - a stash lighter after its I (weight_stash_fraction, the paper's M_W / M_B) stays within the weighted limit
//     and is never worse than whole stashes;
//   - the `auto` registry entry; bad input is an Error naming the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedules/auto_schedule.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/validator.hpp"
#include "support/error_of.hpp"

namespace cleave::pipeline::auto_schedule_test {
namespace {

constexpr double kExact = 1e-9;

AutoScheduleResult run_auto(int p, int m, int limit, const SimulationCosts& costs, int budget = 300) {
  AutoScheduleOptions options;
  options.costs = costs;
  options.memory_limit = limit;
  options.max_evaluations = budget;
  return auto_schedule(p, m, options);
}

// Validator, memory limit, own timing = simulator's; returns the simulation.
SimulationResult check_auto(const AutoScheduleResult& result, int limit, const SimulationCosts& costs) {
  const Schedule& s = result.schedule;
  EXPECT_EQ(s.name, "auto");
  EXPECT_EQ(s.virtual_stages, 1);
  const ValidationResult compute = validate_schedule(s);
  EXPECT_TRUE(compute.ok) << compute.message(s.name);
  const ValidationResult lowered = validate_schedule(lower_schedule(s));
  EXPECT_TRUE(lowered.ok) << lowered.message(s.name);
  const SimulationResult sim = simulate(s, costs);
  EXPECT_NEAR(sim.stats.makespan, result.makespan, kExact);
  EXPECT_LE(result.makespan, result.greedy_makespan + kExact);
  for (int r = 0; r < s.pp_size; ++r) {
    EXPECT_LE(sim.stats.ranks[r].peak_activations, limit) << "rank " << r;
    int f = 0, i = 0, w = 0;
    for (const Action& a : s.ranks[r]) {
      EXPECT_NE(a.kind, ActionKind::kBackward);
      if (a.kind == ActionKind::kForward) ++f;
      if (a.kind == ActionKind::kBackwardInput) ++i;
      if (a.kind == ActionKind::kBackwardWeight) ++w;
    }
    EXPECT_EQ(f, s.num_microbatches);
    EXPECT_EQ(i, s.num_microbatches);
    EXPECT_EQ(w, s.num_microbatches);
  }
  return sim;
}

TEST(AutoSchedule, NeverSlowerThanZbH1AtItsMemoryAndReachesZbH2AtItsMemory) {
  for (int p = 2; p <= 8; ++p) {
    for (int m = 1; m <= 4 * p; ++m) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const SimulationCosts unit = SimulationCosts::uniform(p);
      const auto h1 = simulate(zb_h1_schedule(p, m), unit);
      const auto h2 = simulate(zb_h2_schedule(p, m), unit);
      const AutoScheduleResult result_p = run_auto(p, m, p, unit);
      const auto at_p = check_auto(result_p, p, unit);
      EXPECT_LE(at_p.stats.makespan, h1.stats.makespan + kExact);
      const AutoScheduleResult result_2p = run_auto(p, m, 2 * p - 1, unit);
      const auto at_2p = check_auto(result_2p, 2 * p - 1, unit);
      EXPECT_LE(at_2p.stats.makespan, h2.stats.makespan + kExact);
      // The construction alone (before the handcrafted seeds join) already gets there.
      EXPECT_LE(result_p.greedy_makespan, h1.stats.makespan + kExact);
      EXPECT_LE(result_2p.greedy_makespan, h2.stats.makespan + kExact);
      if (m >= 2 * p - 1) {
        EXPECT_NEAR(at_2p.stats.stage_bubble_fraction, 0.0, kExact);
        EXPECT_NEAR(at_2p.stats.bubble_fraction, (p - 1.0) / (3.0 * m + p - 1), kExact);
      }
    }
  }
}

TEST(AutoSchedule, TightLimitsStayWithinTheLimitAndMoreMemoryNeverHurts) {
  for (int p : {2, 4, 6}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      const SimulationCosts unit = SimulationCosts::uniform(p, 1.0, 1.2, 0.7);
      double previous = 1e300;
      std::vector<int> limits = {1, 2, std::max(1, p - 1), p, 2 * p - 1, 2 * p, 4 * p};
      std::sort(limits.begin(), limits.end());
      limits.erase(std::unique(limits.begin(), limits.end()), limits.end());
      for (int limit : limits) {
        SCOPED_TRACE(::testing::Message() << "limit=" << limit);
        const auto sim = check_auto(run_auto(p, m, limit, unit, 600), limit, unit);
        EXPECT_LE(sim.stats.makespan, previous + kExact);
        previous = sim.stats.makespan;
      }
    }
  }
  // Limit 1: every rank finishes a micro-batch (F, I, W) before it starts the next one.
  const auto one = run_auto(3, 4, 1, SimulationCosts::uniform(3));
  for (const auto& actions : one.schedule.ranks) EXPECT_EQ(peak_activations(actions), 1);
}

TEST(AutoSchedule, UnequalCostsAndLatencyNeverSlowerThanZbH1) {
  for (int p : {3, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m);
      SimulationCosts costs = SimulationCosts::uniform(p, 1.0, 1.1, 0.5);
      costs.stages.back().forward = 1.4;  // a heavier last stage (the loss)
      costs.p2p_latency = 0.05;
      const auto h1 = simulate(zb_h1_schedule(p, m), costs);
      const auto result = run_auto(p, m, p, costs, 1000);
      const auto sim = check_auto(result, p, costs);
      EXPECT_LE(sim.stats.makespan, h1.stats.makespan + kExact);
    }
  }
}

TEST(AutoSchedule, RegistryEntryUsesUnitCostsAndOneFOneBMemory) {
  const Schedule s = make_schedule("auto", 4, 8, 1);
  EXPECT_EQ(s.name, "auto");
  EXPECT_EQ(s.ranks, auto_schedule_uniform(4, 8).ranks);
  const auto sim = simulate(s, SimulationCosts::uniform(4));
  EXPECT_LE(sim.stats.makespan, simulate(zb_h1_schedule(4, 8), SimulationCosts::uniform(4)).stats.makespan + kExact);
  for (const auto& rank : sim.stats.ranks) EXPECT_LE(rank.peak_activations, 4);
  EXPECT_TRUE(is_schedule_name("auto"));
}

using cleave::testing::error_of;

TEST(AutoSchedule, BadInputIsAnErrorNamingTheNumbers) {
  const SimulationCosts unit = SimulationCosts::uniform(4);
  EXPECT_NE(error_of([&] { run_auto(4, 8, -1, unit); }).find("memory limit must be at least 1"), std::string::npos);
  EXPECT_NE(error_of([&] { run_auto(4, 8, 4, SimulationCosts::uniform(3)); })
                .find("the cost table has 3 stages but pp_size is 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run_auto(4, 8, 4, SimulationCosts::uniform(4, 1.0, 0.0, 1.0)); })
                .find("backward-input cost of stage 0 is 0, expected a finite value > 0"),
            std::string::npos);
  SimulationCosts latency = unit;
  latency.p2p_latency = -1;
  EXPECT_NE(error_of([&] { run_auto(4, 8, 4, latency); }).find("p2p latency is -1"), std::string::npos);
  EXPECT_NE(error_of([&] { run_auto(4, 0, 4, unit); }).find("micro-batches must be at least 1, got 0"),
            std::string::npos);
  AutoScheduleOptions fraction;
  fraction.costs = unit;
  fraction.weight_stash_fraction = 1.5;
  EXPECT_NE(error_of([&] { auto_schedule(4, 8, fraction); }).find("weight_stash_fraction must be in (0, 1], got 1.5"),
            std::string::npos);
}

// With a stash weighing less after its I (the paper's M_W < M_B), the same limit holds more deferred W: the
// weighted peak stays within the limit, and the result is never slower than with whole stashes.
TEST(AutoSchedule, LighterStashesAfterInputHoldMoreDeferredWeights) {
  for (int p : {4, 8}) {
    const int m = 3 * p;
    SCOPED_TRACE(::testing::Message() << "p=" << p);
    SimulationCosts costs = SimulationCosts::uniform(p, 1.0, 1.0, 0.5);
    costs.p2p_latency = 0.03;
    AutoScheduleOptions options;
    options.costs = costs;
    options.memory_limit = 2 * p;
    options.objective = AutoScheduleObjective::kSpan;
    const AutoScheduleResult whole = auto_schedule(p, m, options);
    options.weight_stash_fraction = 0.4;
    const AutoScheduleResult light = auto_schedule(p, m, options);
    EXPECT_TRUE(validate_schedule(light.schedule).ok);
    EXPECT_LE(light.span, whole.span + kExact);
    for (const auto& actions : light.schedule.ranks) {
      double before_input = 0, before_weight = 0, peak = 0;
      for (const Action& a : actions) {
        if (a.kind == ActionKind::kForward) before_input += 1;
        if (a.kind == ActionKind::kBackwardInput) before_input -= 1, before_weight += 1;
        if (a.kind == ActionKind::kBackwardWeight) before_weight -= 1;
        peak = std::max(peak, before_input + 0.4 * before_weight);
      }
      EXPECT_LE(peak, 2 * p + kExact);
    }
  }
}

}  // namespace
}  // namespace cleave::pipeline::auto_schedule_test
