// Overlapped F&B pairs as a schedule property (pipeline/overlap_schedule.hpp) and the simulator's model of them
// (simulator.hpp). DualPipeV at pp 2 and 4: after overlap_fb_pairs every steady-state F&B pair is adjacent, the
// schedule still validates, each (stage, micro-batch)'s own actions keep their order, and nothing but the moved
// communication changes; a schedule without the flag has no pairs. The simulator: with all-to-all costs, the
// exposed all-to-all time drops with the overlap and so does the makespan; without all-to-all costs the pairs
// change nothing; a pair's two sides are booked back to back with the hidden part by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_schedule.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/validator.hpp"

namespace cleave::pipeline::overlap_schedule_test {
namespace {

// Each (stage, micro-batch)'s actions on a rank in list order, by kind token.
std::map<std::pair<int, int>, std::vector<ActionKind>> per_microbatch(const std::vector<Action>& actions) {
  std::map<std::pair<int, int>, std::vector<ActionKind>> out;
  for (const Action& a : actions) out[{a.stage, a.microbatch}].push_back(a.kind);
  return out;
}

TEST(OverlapSchedule, DualPipeVPairsBecomeAdjacentAndStillValidate) {
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{{2, 4}, {2, 8}, {4, 8}, {4, 12}}) {
    SCOPED_TRACE("pp " + std::to_string(p) + ", m " + std::to_string(m));
    const Schedule lowered = ensure_lowered(dualpipev_schedule(p, m));
    EXPECT_EQ(count_overlapped_pairs(lowered), 0) << "no pairs without the flag";
    const Schedule paired = overlap_fb_pairs(lowered);
    EXPECT_TRUE(paired.overlap_fb_pairs);
    EXPECT_TRUE(validate_schedule(paired).ok) << validate_schedule(paired).reason;
    // At least DualPipeV's steady state: 2 pairs per [F s0, B s1, F s1, B s0] quad, m - 2p + r + 1 quads on rank r.
    int steady = 0;
    for (int r = 0; r < p; ++r) steady += 2 * (m - 2 * p + r + 1);
    EXPECT_GE(count_overlapped_pairs(paired), steady);
    for (int r = 0; r < p; ++r) {
      const auto& before = lowered.ranks[r];
      const auto& after = paired.ranks[r];
      ASSERT_EQ(before.size(), after.size());
      EXPECT_TRUE(std::is_permutation(before.begin(), before.end(), after.begin(), after.end()));
      EXPECT_EQ(per_microbatch(before), per_microbatch(after)) << "rank " << r;
      // Compute actions keep their order exactly (only communication moved).
      std::vector<Action> cb, ca;
      for (const Action& a : before) if (is_compute(a.kind)) cb.push_back(a);
      for (const Action& a : after) if (is_compute(a.kind)) ca.push_back(a);
      EXPECT_EQ(cb, ca) << "rank " << r;
      for (std::size_t i = 0; i < after.size(); ++i) {
        if (!starts_overlapped_pair(paired, r, i)) continue;
        EXPECT_EQ(after[i].kind, ActionKind::kForward);
        EXPECT_TRUE(is_backward_input(after[i + 1].kind));
        EXPECT_NE(after[i].stage, after[i + 1].stage);
      }
    }
  }
}

TEST(OverlapSchedule, AnUnloweredScheduleIsRefused) {
  try {
    (void)overlap_fb_pairs(dualpipev_schedule(2, 4));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.moe_a2a_overlap"), std::string::npos) << e.what();
  }
}

TEST(OverlapSimulation, ExposedAllToAllDropsWithOverlap) {
  const Schedule lowered = ensure_lowered(dualpipev_schedule(2, 8));
  const Schedule paired = overlap_fb_pairs(lowered);
  SimulationCosts costs = SimulationCosts::uniform(4, 1.0, 1.0, 1.0);
  for (auto& s : costs.stages) {
    s.forward_all_to_all = 0.5;
    s.backward_all_to_all = 0.5;
  }
  const SimulationResult plain = simulate(lowered, costs);
  const SimulationResult overlapped = simulate(paired, costs);
  const double plain_exposed = std::accumulate(plain.exposed_all_to_all.begin(), plain.exposed_all_to_all.end(), 0.0);
  const double overlapped_exposed =
      std::accumulate(overlapped.exposed_all_to_all.begin(), overlapped.exposed_all_to_all.end(), 0.0);
  // Plain: every F and I waits for its 0.5: 2 chunks x 8 micro-batches x 2 passes x 0.5 = 16 per rank.
  EXPECT_DOUBLE_EQ(plain_exposed, 2 * 16.0);
  // Overlapped: a pair hides both halves (0.5 < the other side's compute of 1 or 2); what is left is unpaired.
  const int pairs = count_overlapped_pairs(paired);
  EXPECT_DOUBLE_EQ(overlapped_exposed, plain_exposed - pairs * 1.0);
  EXPECT_LT(overlapped.stats.makespan, plain.stats.makespan);

  // Without all-to-all the pairs change nothing.
  const SimulationCosts bare = SimulationCosts::uniform(4, 1.0, 1.0, 1.0);
  EXPECT_DOUBLE_EQ(simulate(paired, bare).stats.makespan, simulate(lowered, bare).stats.makespan);
}

TEST(OverlapSimulation, APairIsBookedBackToBackWithTheHiddenPartByHand) {
  // F = 1 + a2a 3, B = I 1 + W 1 + a2a 0.5: F exposes max(0, 3 - 2) = 1, B exposes max(0, 0.5 - 1) = 0.
  const Schedule paired = overlap_fb_pairs(ensure_lowered(dualpipev_schedule(2, 4)));
  SimulationCosts costs = SimulationCosts::uniform(4, 1.0, 1.0, 1.0);
  for (auto& s : costs.stages) {
    s.forward_all_to_all = 3.0;
    s.backward_all_to_all = 0.5;
  }
  const SimulationResult sim = simulate(paired, costs);
  int checked = 0;
  for (int r = 0; r < 2; ++r) {
    const auto& list = sim.lowered.ranks[r];
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!starts_overlapped_pair(sim.lowered, r, i)) continue;
      const TimedAction& f = sim.timeline.ranks[r][i];
      const TimedAction& b = sim.timeline.ranks[r][i + 1];
      const double c_b = list[i + 1].kind == ActionKind::kBackward ? 2.0 : 1.0;
      EXPECT_DOUBLE_EQ(f.end - f.start, 1.0 + std::max(0.0, 3.0 - c_b));
      EXPECT_DOUBLE_EQ(b.start, f.end);
      EXPECT_DOUBLE_EQ(b.end - b.start, c_b + std::max(0.0, 0.5 - 1.0));
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace cleave::pipeline::overlap_schedule_test
