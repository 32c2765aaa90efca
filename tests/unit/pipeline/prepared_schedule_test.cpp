// PreparedSchedule (pipeline/simulator.hpp): a schedule lowered, validated and indexed once times exactly as the
// schedule itself does, under every schedule and cost table the simulator takes (per-stage costs, P2P latency and
// bandwidth, all-to-alls in overlapped F&B pairs, blocking point-to-point, replayed durations); an invalid
// schedule is refused when prepared, with the validator's message, and a bad cost table on every call.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_schedule.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::pipeline::prepared_schedule_test {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every field of two results, doubles compared exactly (the same arithmetic on the same list).
void expect_same(const SimulationResult& a, const SimulationResult& b, const std::string& what) {
  EXPECT_EQ(a.lowered, b.lowered) << what;
  ASSERT_EQ(a.timeline.ranks.size(), b.timeline.ranks.size()) << what;
  for (std::size_t r = 0; r < a.timeline.ranks.size(); ++r) {
    ASSERT_EQ(a.timeline.ranks[r].size(), b.timeline.ranks[r].size()) << what;
    for (std::size_t i = 0; i < a.timeline.ranks[r].size(); ++i) {
      const TimedAction &x = a.timeline.ranks[r][i], &y = b.timeline.ranks[r][i];
      EXPECT_EQ(x.action, y.action) << what;
      EXPECT_EQ(x.start, y.start) << what << " " << format_action(x.action);
      EXPECT_EQ(x.end, y.end) << what << " " << format_action(x.action);
    }
  }
  EXPECT_EQ(a.stats.makespan, b.stats.makespan) << what;
  EXPECT_EQ(a.stats.bubble_fraction, b.stats.bubble_fraction) << what;
  EXPECT_EQ(a.stats.stage_bubble_fraction, b.stats.stage_bubble_fraction) << what;
  EXPECT_EQ(a.exposed_all_to_all, b.exposed_all_to_all) << what;
}

// Uneven stages, transfers that cost latency and bandwidth, reductions, an optimizer step and all-to-alls.
SimulationCosts uneven(int num_stages) {
  SimulationCosts costs;
  for (int s = 0; s < num_stages; ++s) {
    costs.stages.push_back(StageCost{1.0 + 0.1 * s, 0.7 + 0.05 * s, 0.9 - 0.03 * s, 0.25, 100.0 + s, 0.3, 0.2});
  }
  costs.optimizer_step = 0.4;
  costs.p2p_latency = 0.05;
  costs.p2p_bandwidth = 1000;
  return costs;
}

TEST(PreparedSchedule, TimesEveryScheduleAsTheScheduleItselfUnderManyCostTables) {
  int compared = 0;
  for (auto name : schedule_names()) {
    for (const int pp : {2, 3, 4}) {
      const int m = std::max(6, schedule_min_microbatches(name, pp));
      const Schedule compute = make_schedule(name, pp, m, default_virtual_stages(name));
      const Schedule lowered = lower_schedule(compute);
      for (const Schedule* input : {&compute, &lowered}) {  // prepared from the compute form or the lowered one
        const PreparedSchedule prepared(*input);
        EXPECT_EQ(prepared.lowered(), lowered) << name;
        SimulationCosts costs = uneven(compute.num_stages);
        const std::string what = std::string(name) + " pp " + std::to_string(pp);
        expect_same(simulate(prepared, costs), simulate(*input, costs), what);
        // The same prepared schedule under other tables: uniform, free transfers, a replay of measured durations.
        expect_same(simulate(prepared, SimulationCosts::uniform(compute.num_stages, 1.3, 0.7, 1.1)),
                    simulate(*input, SimulationCosts::uniform(compute.num_stages, 1.3, 0.7, 1.1)), what + " uniform");
        costs.p2p_latency = 0, costs.p2p_bandwidth = 0;
        expect_same(simulate(prepared, costs), simulate(*input, costs), what + " free p2p");
        SimulationCosts replay = uneven(compute.num_stages);
        for (const auto& rank : lowered.ranks) {
          replay.action_durations.emplace_back(rank.size(), -1.0);
          for (std::size_t i = 0; i < rank.size(); i += 3) replay.action_durations.back()[i] = 0.5 + 0.01 * i;
        }
        expect_same(simulate(prepared, replay), simulate(*input, replay), what + " replay");
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 40);
}

TEST(PreparedSchedule, OverlappedPairsAndBlockingPointToPointTimeAsTheScheduleItself) {
  // Overlapped F&B pairs (parallel.moe_a2a_overlap): the all-to-alls hide behind the other side's compute.
  const Schedule pairs = overlap_fb_pairs(lower_schedule(make_schedule("dualpipev", 2, 8, 2)));
  ASSERT_TRUE(pairs.overlap_fb_pairs);
  expect_same(simulate(PreparedSchedule(pairs), uneven(pairs.num_stages)), simulate(pairs, uneven(pairs.num_stages)),
              "dualpipev pairs");
  // Blocking point-to-point reorders the transfers (a list of its own, indexed afresh).
  for (const bool fb_pairs : {false, true}) {
    const Schedule s = fb_pairs ? interleaved_1f1b_schedule(2, 4, 2) : one_f_one_b_schedule(3, 6);
    SimulationCosts costs = uneven(s.num_stages);
    costs.blocking_p2p = true;
    costs.blocking_fb_pairs = fb_pairs;
    const SimulationResult prepared = simulate(PreparedSchedule(s), costs);
    expect_same(prepared, simulate(s, costs), fb_pairs ? "interleaved blocking" : "1f1b blocking");
    EXPECT_NE(prepared.lowered, lower_schedule(s));  // the reordered list was timed, not the prepared one
  }
}

TEST(PreparedSchedule, RefusesAnInvalidScheduleWhenPreparedAndABadCostTableOnEveryCall) {
  Schedule broken = lower_schedule(one_f_one_b_schedule(2, 2));
  std::swap(broken.ranks[1][0], broken.ranks[1][1]);  // rank 1 computes before it receives
  const std::string validator = error_of([&] { simulate(broken, SimulationCosts::uniform(2)); });
  ASSERT_FALSE(validator.empty());
  EXPECT_EQ(error_of([&] { PreparedSchedule p(broken); }), validator);

  const PreparedSchedule ok(one_f_one_b_schedule(2, 2));
  EXPECT_NE(error_of([&] { simulate(ok, SimulationCosts::uniform(3)); })
                .find("the cost table has 3 stages but schedule '1f1b' has 2"),
            std::string::npos);
  SimulationCosts negative = SimulationCosts::uniform(2);
  negative.stages[0].forward = -1;
  EXPECT_EQ(error_of([&] { simulate(ok, negative); }),
            error_of([&] { simulate(one_f_one_b_schedule(2, 2), negative); }));
  EXPECT_NE(error_of([&] { simulate(ok, negative); }).find("forward cost of stage 0 is -1"), std::string::npos);
}

}  // namespace
}  // namespace cleave::pipeline::prepared_schedule_test
