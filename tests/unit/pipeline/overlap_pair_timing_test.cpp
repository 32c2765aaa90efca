// time_overlapped_pair against timelines worked out by hand (pipeline/overlap_pair_timing.hpp): the baton over equal
// segments, each wait hidden only by the other side's one segment; a B's W as its tail; under shared cores the
// hidden seconds stay in the pair; the simulator books a pair's sides that way and accounts for every all-to-all.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_pair_timing.hpp"
#include "pipeline/overlap_schedule.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::pipeline::overlap_pair_timing_test {
namespace {

double sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

TEST(OverlapPairTiming, OneWaitEachHidesOnlyBehindTheOtherSidesSegment) {
  // F: compute 2 in segments 1 | 1, all-to-all 3; B: compute 4 in 2 | 2, all-to-all 2.
  // t 0-1 F; F's exchange done at 4; t 1-3 B, its exchange done at 5; F waits 3-4 (exposed 1), runs 4-5 and ends;
  // B takes the rank at 5, its exchange is done (exposed 0), runs 5-7.
  const PairSide f{2, 0, 3, 0, 1}, b{4, 0, 2, 0, 1};
  const PairTiming t = time_overlapped_pair(f, b, PairCores::kSpare);
  EXPECT_DOUBLE_EQ(t.exposed_first, 1.0);
  EXPECT_DOUBLE_EQ(t.exposed_second, 0.0);
  EXPECT_DOUBLE_EQ(t.hidden_first, 2.0);
  EXPECT_DOUBLE_EQ(t.hidden_second, 2.0);
  EXPECT_DOUBLE_EQ(t.seconds, 7.0);
  EXPECT_DOUBLE_EQ(t.shared_core, 0.0);
  // Not split, B's whole compute 4 would hide F's 3: nothing exposed.
  const PairTiming whole = time_overlapped_pair({2, 0, 3, 0, 0}, {4, 0, 2, 0, 0}, PairCores::kSpare);
  EXPECT_DOUBLE_EQ(whole.exposed_first, 0.0);
  EXPECT_DOUBLE_EQ(whole.exposed_second, 0.0);
  EXPECT_DOUBLE_EQ(whole.seconds, 6.0);
}

TEST(OverlapPairTiming, AMoeBlocksThreeForwardAndTwoBackwardWaitsByHand) {
  // F: 4 in segments of 1, 3 waits of 2; B (I): 3 in segments of 1, 2 waits of 1.
  // F 0-1 (ready 3) | B 1-2 (ready 3) | F waits 2-3, 3-4 (ready 6) | B 4-5 (ready 6) | F waits 5-6, 6-7 (ready 9)
  // | B 7-8, ends | F waits 8-9, 9-10. F exposes 3 of 6, B 0 of 2.
  const PairTiming t = time_overlapped_pair({4, 0, 6, 0, 3}, {3, 0, 2, 0, 2}, PairCores::kSpare);
  EXPECT_DOUBLE_EQ(t.exposed_first, 3.0);
  EXPECT_DOUBLE_EQ(t.exposed_second, 0.0);
  EXPECT_DOUBLE_EQ(t.seconds, 10.0);
  // A B (I + W, W = 2 as its tail): its last segment runs 7-10, so F's last exchange (ready 9) is hidden.
  const PairTiming with_w = time_overlapped_pair({4, 0, 6, 0, 3}, {5, 2, 2, 0, 2}, PairCores::kSpare);
  EXPECT_DOUBLE_EQ(with_w.exposed_first, 2.0);
  EXPECT_DOUBLE_EQ(with_w.exposed_second, 0.0);
  EXPECT_DOUBLE_EQ(with_w.seconds, 11.0);
}

TEST(OverlapPairTiming, TheExchangesOwnTimeNeverHides) {
  // The first test's pair with 1.5 of F's 3 its own time: F 0-1 (the wait for the peer, 1.5, done at 2.5) | B 1-3
  // (ready 5) | F pays its own 1.5 at 3-4.5, runs 4.5-5.5, ends | B (ready) runs 5.5-7.5. F exposes 1.5, not 1.
  const PairTiming t = time_overlapped_pair({2, 0, 3, 1.5, 1}, {4, 0, 2, 0, 1}, PairCores::kSpare);
  EXPECT_DOUBLE_EQ(t.exposed_first, 1.5);
  EXPECT_DOUBLE_EQ(t.exposed_second, 0.0);
  EXPECT_DOUBLE_EQ(t.hidden_first, 1.5);
  EXPECT_DOUBLE_EQ(t.seconds, 7.5);
  // Not split: own + max(0, 3 - 1.5 - 4) = 1.5.
  EXPECT_DOUBLE_EQ(time_overlapped_pair({2, 0, 3, 1.5, 0}, {4, 0, 2, 0, 0}, PairCores::kSpare).exposed_first, 1.5);
}

TEST(OverlapPairTiming, SharedCoresKeepTheHiddenSecondsInThePair) {
  // The first test's pair: the hand-overs still count 1 exposed, but both sides' 2 hidden stay: 2 + 3 + 4 + 2 = 11.
  const PairTiming t = time_overlapped_pair({2, 0, 3, 0, 1}, {4, 0, 2, 0, 1}, PairCores::kShared);
  EXPECT_DOUBLE_EQ(t.exposed_first, 1.0);
  EXPECT_DOUBLE_EQ(t.exposed_second, 0.0);
  EXPECT_DOUBLE_EQ(t.shared_core, 4.0);
  EXPECT_DOUBLE_EQ(t.seconds, 11.0);
}

TEST(OverlapPairTiming, BadSidesAreRefused) {
  EXPECT_THROW((void)time_overlapped_pair({1, 0, 1, 0, -1}, {1, 0, 1, 0, 1}, PairCores::kSpare), Error);
  EXPECT_THROW((void)time_overlapped_pair({1, 0, 1, 0, 1}, {1, 2, 1, 0, 1}, PairCores::kSpare), Error);
  EXPECT_THROW((void)time_overlapped_pair({1, 0, 1, 2, 1}, {1, 0, 1, 0, 1}, PairCores::kSpare), Error);
  SimulationCosts costs = SimulationCosts::uniform(4);
  costs.stages[1].backward_all_to_all_waits = -2;
  EXPECT_THROW((void)simulate(ensure_lowered(dualpipev_schedule(2, 4)), costs), Error);
  costs.stages[1].backward_all_to_all_waits = 2;
  costs.stages[1].backward_all_to_all_own = 0.5;  // more than its all-to-all of 0
  EXPECT_THROW((void)simulate(ensure_lowered(dualpipev_schedule(2, 4)), costs), Error);
}

// The simulator on DualPipeV pp 2, 8 micro-batches, F = I = W = 1, all-to-alls of 1.5 (F, 3 waits) and 1 (I, 2 waits).
SimulationCosts moe_costs(PairCores cores) {
  SimulationCosts costs = SimulationCosts::uniform(4, 1.0, 1.0, 1.0);
  for (auto& s : costs.stages) {
    s.forward_all_to_all = 1.5;
    s.backward_all_to_all = 1.0;
    s.forward_all_to_all_waits = 3;
    s.backward_all_to_all_waits = 2;
  }
  costs.pair_cores = cores;
  return costs;
}

TEST(OverlapPairTiming, TheSimulatorBooksEachPairAsTheBatonTimesIt) {
  const Schedule lowered = ensure_lowered(dualpipev_schedule(2, 8));
  const Schedule paired = overlap_fb_pairs(lowered);
  // An F (1 in segments of 1/4, waits of 0.5) paired with an I (1 in segments of 1/3, waits of 0.5):
  // F 0-.25 (ready .75) | I .25-.5833 (ready 1.0833) | F waits .5833-.75, runs .75-1 (ready 1.5) | I waits 1-1.0833,
  // runs 1.0833-1.4167 (ready 1.9167) | F waits 1.4167-1.5, runs 1.5-1.75 (ready 2.25) | I waits 1.75-1.9167, runs
  // 1.9167-2.25, ends | F (ready) runs 2.25-2.5: F exposes 1/6 + 1/12 = 1/4 of 1.5, I 1/12 + 1/6 = 1/4 of 1.
  // With a B (I + W, W = 1 its tail) in place of the I, its last segment runs 1.9167-3.25: the same exposures.
  const double exposed_f = 0.25, exposed_b = 0.25;
  for (PairCores cores : {PairCores::kSpare, PairCores::kShared}) {
    const SimulationResult sim = simulate(paired, moe_costs(cores));
    const SimulationResult plain = simulate(lowered, moe_costs(cores));
    int checked = 0;
    for (int r = 0; r < 2; ++r) {
      for (std::size_t i = 0; i < sim.lowered.ranks[r].size(); ++i) {
        if (!starts_overlapped_pair(sim.lowered, r, i)) continue;
        const double c_b = sim.lowered.ranks[r][i + 1].kind == ActionKind::kBackward ? 2.0 : 1.0;
        const TimedAction& f = sim.timeline.ranks[r][i];
        const TimedAction& b = sim.timeline.ranks[r][i + 1];
        const bool shared = cores == PairCores::kShared;
        EXPECT_NEAR(f.end - f.start, 1.0 + (shared ? 1.5 : exposed_f), 1e-12);
        EXPECT_DOUBLE_EQ(b.start, f.end);
        EXPECT_NEAR(b.end - b.start, c_b + (shared ? 1.0 : exposed_b), 1e-12);
        ++checked;
      }
      // Every all-to-all is exposed, hidden or (shared) paid for: exposed + shared never exceeds the plain run's.
      EXPECT_LE(sim.exposed_all_to_all[r] + sim.shared_core_all_to_all[r], plain.exposed_all_to_all[r] + 1e-9);
    }
    EXPECT_GT(checked, 0);
    if (cores == PairCores::kShared) {
      // Nothing hidden in time: every rank's pairs last as their two actions did unpaired.
      EXPECT_NEAR(sum(sim.exposed_all_to_all) + sum(sim.shared_core_all_to_all), sum(plain.exposed_all_to_all), 1e-9);
      EXPECT_GE(sim.stats.makespan, plain.stats.makespan - 1e-9);
    } else {
      EXPECT_DOUBLE_EQ(sum(sim.shared_core_all_to_all), 0.0);
      EXPECT_LT(sim.stats.makespan, plain.stats.makespan);
    }
  }
}

}  // namespace
}  // namespace cleave::pipeline::overlap_pair_timing_test
