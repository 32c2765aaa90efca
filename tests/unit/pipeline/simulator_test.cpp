// Simulator and timeline statistics on cases small enough to time by hand (P2P latency and bandwidth,
// per-stage costs, reduction and optimizer costs), the docs/architecture.md bubble definitions on a hand-made
// timeline, and bad cost tables. The published bubble formulas over the whole grid are in
// generators_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "engine/core/error.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/simulator.hpp"
#include "support/error_of.hpp"

namespace cleave::pipeline::simulator_test {
namespace {

const TimedAction& find(const SimulationResult& sim, int rank, const std::string& token) {
  for (const auto& t : sim.timeline.ranks[rank]) {
    if (format_action(t.action) == token) return t;
  }
  ADD_FAILURE() << token << " not on rank " << rank;
  static const TimedAction none{};
  return none;
}

void expect_span(const SimulationResult& sim, int rank, const std::string& token, double start, double end) {
  const TimedAction& t = find(sim, rank, token);
  EXPECT_DOUBLE_EQ(t.start, start) << token;
  EXPECT_DOUBLE_EQ(t.end, end) << token;
}

TEST(Simulator, OneFOneBWithLatencyAndBandwidthByHand) {
  // F = 1, B = I + W = 2; every transfer: 0.5 latency + 100 bytes / 200 bytes per unit = 1.
  SimulationCosts costs = SimulationCosts::uniform(2);
  for (auto& stage : costs.stages) stage.output_bytes = 100;
  costs.p2p_latency = 0.5;
  costs.p2p_bandwidth = 200;
  const SimulationResult sim = simulate(one_f_one_b_schedule(2, 2), costs);
  expect_span(sim, 0, "0F0", 0, 1);
  expect_span(sim, 0, "0SEND_F0", 1, 1);
  expect_span(sim, 0, "0F1", 1, 2);
  expect_span(sim, 1, "1RECV_F0", 0, 2);  // posted at once, data arrives at 1 + 1
  expect_span(sim, 1, "1F0", 2, 3);
  expect_span(sim, 1, "1B0", 3, 5);
  expect_span(sim, 1, "1F1", 5, 6);      // its input arrived at 3 already
  expect_span(sim, 1, "1B1", 6, 8);
  expect_span(sim, 0, "0RECV_B0", 2, 6);
  expect_span(sim, 0, "0B0", 6, 8);
  expect_span(sim, 0, "0B1", 9, 11);     // 1B1's gradient leaves at 8, arrives at 9
  expect_span(sim, 0, "OPTIMIZER_STEP", 11, 11);
  EXPECT_DOUBLE_EQ(sim.stats.makespan, 11);
  EXPECT_DOUBLE_EQ(sim.stats.ranks[0].busy, 6);
  EXPECT_DOUBLE_EQ(sim.stats.ranks[1].busy, 6);
  EXPECT_DOUBLE_EQ(sim.stats.bubble_fraction, 10.0 / 22.0);
  EXPECT_DOUBLE_EQ(sim.stats.ranks[0].stage_bubble_fraction, 5.0 / 11.0);
  EXPECT_DOUBLE_EQ(sim.stats.ranks[1].stage_bubble_fraction, 0.0);  // busy from 2 to 8 without a gap
  EXPECT_DOUBLE_EQ(sim.stats.stage_bubble_fraction, 5.0 / 17.0);
  EXPECT_EQ(sim.stats.ranks[0].peak_activations, 2);
  EXPECT_EQ(sim.stats.ranks[1].peak_activations, 1);
}

// A stage's send waits (the planner's point_to_point_wait: the receiver waits for what the sender lost) lengthen each
// transfer that stage sends to another rank, its F's activations by forward_send_wait and its B's gradients by
// backward_send_wait; the schedule above, timed again by hand.
TEST(Simulator, SendWaitsDelayEachTransferFromTheirStage) {
  SimulationCosts costs = SimulationCosts::uniform(2);
  for (auto& stage : costs.stages) stage.output_bytes = 100;
  costs.p2p_latency = 0.5;
  costs.p2p_bandwidth = 200;
  costs.stages[0].forward_send_wait = 0.25;   // stage 0's activations: 1 + 0.25 per transfer
  costs.stages[1].backward_send_wait = 0.5;   // stage 1's gradients: 1 + 0.5
  costs.stages[0].backward_send_wait = 7;     // stage 0 sends no gradient, stage 1 no activation: never used
  costs.stages[1].forward_send_wait = 7;
  const SimulationResult sim = simulate(one_f_one_b_schedule(2, 2), costs);
  expect_span(sim, 1, "1F0", 2.25, 3.25);     // 0F0 ends at 1, its activation arrives at 1 + 1.25
  expect_span(sim, 1, "1B0", 3.25, 5.25);
  expect_span(sim, 1, "1F1", 5.25, 6.25);     // 0F1's arrived at 2 + 1.25
  expect_span(sim, 1, "1B1", 6.25, 8.25);
  expect_span(sim, 0, "0B0", 6.75, 8.75);     // 1B0's gradient leaves at 5.25, arrives at 5.25 + 1.5
  expect_span(sim, 0, "0B1", 9.75, 11.75);    // 1B1's leaves at 8.25
  EXPECT_DOUBLE_EQ(sim.stats.makespan, 11.75);
  costs.stages[0].forward_send_wait = -1;
  EXPECT_THROW(simulate(one_f_one_b_schedule(2, 2), costs), Error);
}

TEST(Simulator, BlockingPointToPointHoldsTheRankUntilBothEndsPostedAndTheDataArrived) {
  // The case above with blocking_p2p (Megatron-LM of 2021's batch_isend_irecv + wait + torch.cuda.synchronize, where
  // its schedules.py posts them): each batch of SEND/RECV holds its rank until its transfers are done; a transfer
  // (0.5 + 100 / 200 = 1) starts once both of its ends are posted. Megatron's order (send_forward,
  // send_forward_recv_backward, send_backward_recv_forward): rank 0 F0 [SEND_F0] F1 [SEND_F1 RECV_B0] B0 [RECV_B1]
  // B1, rank 1 [RECV_F0] F0 B0 [SEND_B0 RECV_F1] F1 B1 [SEND_B1]; the lowering posted rank 1's RECV_F1 before B0.
  SimulationCosts costs = SimulationCosts::uniform(2);
  for (auto& stage : costs.stages) stage.output_bytes = 100;
  costs.p2p_latency = 0.5;
  costs.p2p_bandwidth = 200;
  costs.blocking_p2p = true;
  const SimulationResult sim = simulate(one_f_one_b_schedule(2, 2), costs);
  expect_span(sim, 0, "0F0", 0, 1);
  expect_span(sim, 0, "0SEND_F0", 1, 2);  // the sender waits for its transfer (async: [1, 1])
  expect_span(sim, 1, "1RECV_F0", 0, 2);
  expect_span(sim, 0, "0F1", 2, 3);       // async: [1, 2]
  expect_span(sim, 1, "1F0", 2, 3);
  expect_span(sim, 1, "1B0", 3, 5);       // F1's receive is posted after B0, with B0's send
  expect_span(sim, 1, "1SEND_B0", 5, 6);
  expect_span(sim, 1, "1RECV_F1", 5, 6);
  expect_span(sim, 0, "0SEND_F1", 3, 6);  // rank 1 posts its end at 5
  expect_span(sim, 0, "0RECV_B0", 3, 6);
  expect_span(sim, 0, "0B0", 6, 8);
  expect_span(sim, 1, "1F1", 6, 7);       // async: [5, 6]
  expect_span(sim, 1, "1B1", 7, 9);
  expect_span(sim, 1, "1SEND_B1", 9, 10);
  expect_span(sim, 0, "0RECV_B1", 8, 10);
  expect_span(sim, 0, "0B1", 10, 12);
  EXPECT_DOUBLE_EQ(sim.stats.makespan, 12);  // async: 11
  EXPECT_DOUBLE_EQ(sim.stats.ranks[0].busy, 6);  // transfers are idle time, not busy
  // Free transfers: only the rendezvous is left, which this schedule's dependencies already imply.
  costs.p2p_latency = 0;
  costs.p2p_bandwidth = 0;
  EXPECT_DOUBLE_EQ(simulate(one_f_one_b_schedule(2, 2), costs).stats.makespan, 9);
}

TEST(Simulator, BlockingPointToPointPostsWhereMegatronsInterleavedScheduleDoes) {
  // forward_backward_pipelining_with_interleaving (Megatron-LM de7dc40f) at p 2, v 2, m 4 on rank 0, by hand from its
  // loops: warm-up send_forward_recv_forward after each F (the last one also receives the first backward's
  // gradient), then F and B back to back with one send_forward_backward_recv_forward_backward after both, then
  // send_backward_recv_backward after each B. Stages 0 and 2 are rank 0's.
  SimulationCosts costs = SimulationCosts::uniform(4);
  costs.blocking_p2p = true;
  costs.blocking_fb_pairs = true;
  const SimulationResult sim = simulate(interleaved_1f1b_schedule(2, 4, 2), costs);
  std::string line;
  for (const auto& a : sim.lowered.ranks[0]) {
    if (!line.empty()) line += ' ';
    line += format_action(a);
  }
  EXPECT_EQ(line,
            "0F0 0SEND_F0 0F1 0SEND_F1 2RECV_F0 2F0 2SEND_F0 2RECV_F1 2F1 2SEND_F1 2RECV_B0 0F2 2B0 "
            "0SEND_F2 2SEND_B0 2RECV_B1 0F3 2B1 0SEND_F3 2SEND_B1 2RECV_F2 0RECV_B0 2F2 0B0 "
            "2SEND_F2 2RECV_F3 0RECV_B1 2F3 0B1 2SEND_F3 2RECV_B2 2B2 2SEND_B2 2RECV_B3 2B3 "
            "2SEND_B3 2REDUCE_GRAD 0RECV_B2 0B2 0RECV_B3 0B3 0REDUCE_GRAD OPTIMIZER_STEP");
  // Without the pairs (the non-interleaved code's batch between each F and the backward after it) the interleaved
  // warm-up, sized for communication after both, deadlocks: refused by name.
  costs.blocking_fb_pairs = false;
  try {
    simulate(interleaved_1f1b_schedule(2, 4, 2), costs);
    ADD_FAILURE() << "expected a deadlock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks with blocking point-to-point"), std::string::npos) << e.what();
  }
}

TEST(Simulator, PerStageCostsReductionAndOptimizerStep) {
  SimulationCosts costs;
  costs.stages = {StageCost{2, 1, 1, 0.5, 0}, StageCost{3, 2, 2, 0.25, 0}};
  costs.optimizer_step = 1;
  const SimulationResult sim = simulate(gpipe_schedule(2, 1), costs);
  expect_span(sim, 0, "0F0", 0, 2);
  expect_span(sim, 1, "1F0", 2, 5);
  expect_span(sim, 1, "1B0", 5, 9);
  expect_span(sim, 1, "1REDUCE_GRAD", 9, 9.25);
  expect_span(sim, 1, "OPTIMIZER_STEP", 9.25, 10.25);
  expect_span(sim, 0, "0B0", 9, 11);
  expect_span(sim, 0, "0REDUCE_GRAD", 11, 11.5);
  expect_span(sim, 0, "OPTIMIZER_STEP", 11.5, 12.5);
  EXPECT_DOUBLE_EQ(sim.stats.makespan, 12.5);
  EXPECT_DOUBLE_EQ(sim.stats.ranks[0].busy, 2 + 2 + 0.5 + 1);
  EXPECT_DOUBLE_EQ(sim.stats.ranks[1].bubble_fraction, (12.5 - (3 + 4 + 0.25 + 1)) / 12.5);
}

TEST(Simulator, LoweredAndComputeInputGiveTheSameTimeline) {
  for (auto name : schedule_names()) {
    const int m = std::max(5, schedule_min_microbatches(name, 3));  // dualpipev needs m >= 2p
    const Schedule compute = make_schedule(name, 3, m, default_virtual_stages(name));
    SimulationCosts costs = SimulationCosts::uniform(compute.num_stages, 1.3, 0.7, 1.1);
    costs.p2p_latency = 0.2;
    const SimulationResult a = simulate(compute, costs);
    const SimulationResult b = simulate(lower_schedule(compute), costs);
    EXPECT_EQ(a.lowered.ranks, b.lowered.ranks) << name;
    EXPECT_DOUBLE_EQ(a.stats.makespan, b.stats.makespan) << name;
    EXPECT_GT(a.stats.makespan, 0.0);
  }
}

TEST(Simulator, LatencyOnlyEverDelaysTheStep) {
  for (auto name : schedule_names()) {
    const Schedule s = make_schedule(name, 4, 8, default_virtual_stages(name));
    SimulationCosts costs = SimulationCosts::uniform(s.num_stages);
    const double base = simulate(s, costs).stats.makespan;
    costs.p2p_latency = 0.25;
    const double slow = simulate(s, costs).stats.makespan;
    // The critical path crosses the rank boundaries at least 2(p − 1) times (down and back up), except in
    // ZB-H2, whose last rank never idles once started: there it crosses only on the way down, p − 1 times.
    const int crossings = name == "zb_h2" ? 3 : 2 * 3;
    EXPECT_GE(slow, base + crossings * 0.25 - 1e-12) << name;
    if (name == "zb_h2") {
      EXPECT_NEAR(slow, base + 3 * 0.25, 1e-12);
    }
  }
}

TEST(TimelineStats, DefinitionsOnAHandMadeTimeline) {
  // Times as an executor would record them: not starting at zero.
  Timeline t;
  t.ranks.resize(3);
  t.ranks[0] = {{{ActionKind::kForward, 0, 0}, 100, 102}, {{ActionKind::kSendF, 0, 0}, 102, 102},
                {{ActionKind::kBackward, 0, 0}, 106, 110}};
  t.ranks[1] = {{{ActionKind::kRecvF, 1, 0}, 100, 103}, {{ActionKind::kForward, 1, 0}, 103, 104},
                {{ActionKind::kBackward, 1, 0}, 104, 106}};
  // Rank 2 holds no work at all: idle for the whole step.
  const TimelineStats s = timeline_stats(t);
  EXPECT_DOUBLE_EQ(s.start, 100);
  EXPECT_DOUBLE_EQ(s.makespan, 10);
  EXPECT_DOUBLE_EQ(s.ranks[0].busy, 6);
  EXPECT_DOUBLE_EQ(s.ranks[0].bubble_fraction, 0.4);
  EXPECT_DOUBLE_EQ(s.ranks[0].stage_bubble_fraction, 0.4);  // gap 102..106 inside 100..110
  EXPECT_DOUBLE_EQ(s.ranks[1].busy, 3);                     // the RECV's wait is not work
  EXPECT_DOUBLE_EQ(s.ranks[1].first_start, 103);
  EXPECT_DOUBLE_EQ(s.ranks[1].stage_bubble_fraction, 0.0);
  EXPECT_DOUBLE_EQ(s.ranks[2].bubble_fraction, 1.0);
  EXPECT_DOUBLE_EQ(s.bubble_fraction, (4.0 + 7.0 + 10.0) / 30.0);
  EXPECT_DOUBLE_EQ(s.stage_bubble_fraction, 4.0 / 13.0);
  EXPECT_EQ(s.ranks[0].peak_activations, 1);
  EXPECT_EQ(peak_activations({{ActionKind::kForward, 0, 0}, {ActionKind::kForward, 0, 1},
                              {ActionKind::kBackwardInput, 0, 0}, {ActionKind::kForward, 0, 2},
                              {ActionKind::kBackwardWeight, 0, 0}}),
            3);
}

// TimelineStats::longest_span: the step of overlapped steps (the zero-bubble paper's post-validation) is the longest
// per-rank span, first work action to last; a RECV's wait before a rank's first work is not in it.
TEST(TimelineStats, LongestSpanIsTheLongestRanksFirstStartToLastEnd) {
  Timeline t;
  t.ranks.resize(2);
  t.ranks[0] = {{{ActionKind::kForward, 0, 0}, 100, 102}, {{ActionKind::kSendF, 0, 0}, 102, 102},
                {{ActionKind::kBackward, 0, 0}, 104, 107}, {{ActionKind::kOptimizerStep, -1, -1}, 107, 108}};
  t.ranks[1] = {{{ActionKind::kRecvF, 1, 0}, 100, 103}, {{ActionKind::kForward, 1, 0}, 103, 104},
                {{ActionKind::kBackward, 1, 0}, 104, 110}, {{ActionKind::kOptimizerStep, -1, -1}, 110, 112}};
  const TimelineStats s = timeline_stats(t);
  EXPECT_DOUBLE_EQ(s.makespan, 12);      // 100 .. 112
  EXPECT_DOUBLE_EQ(s.longest_span, 9);   // rank 1: 103 .. 112 (rank 0: 100 .. 108, 8)
  // 1F1B's first rank starts first and ends last: its span is the makespan (the by-hand case above, 11).
  SimulationCosts costs = SimulationCosts::uniform(2);
  for (auto& stage : costs.stages) stage.output_bytes = 100;
  costs.p2p_latency = 0.5;
  costs.p2p_bandwidth = 200;
  const SimulationResult one = simulate(one_f_one_b_schedule(2, 2), costs);
  EXPECT_DOUBLE_EQ(one.stats.longest_span, 11);
  EXPECT_DOUBLE_EQ(one.stats.longest_span, one.stats.makespan);
  // ZB-H2's later ranks start later and end with the first: the parallelogram the paper makes bubble-free by
  // overlapping steps. Its longest span is below its makespan by at least the last rank's start offset less its
  // drain; at uniform costs F = I = W = 1 and free transfers, exactly (p - 1) F shorter (the last rank idles only
  // before its first F).
  const SimulationResult h2 = simulate(zb_h2_schedule(4, 8), SimulationCosts::uniform(4, 1, 1, 1));
  EXPECT_LT(h2.stats.longest_span, h2.stats.makespan);
  EXPECT_DOUBLE_EQ(h2.stats.longest_span, 8 * 3);  // m (F + I + W): no bubble inside any rank's span
  EXPECT_DOUBLE_EQ(h2.stats.makespan, 8 * 3 + 3);
}

using cleave::testing::error_of;

TEST(Simulator, ReplaysPerActionDurations) {
  // GPipe p=2 m=1, F = 1, B = 2 per stage; the replay makes 1F0 take 4 and the optimizer on rank 0 take 3,
  // everything else (-1 and the SEND/RECV entries) keeps the stage cost.
  const Schedule s = lower_schedule(gpipe_schedule(2, 1));
  SimulationCosts costs = SimulationCosts::uniform(2);
  costs.action_durations.resize(2);
  for (int r = 0; r < 2; ++r) {
    for (const Action& a : s.ranks[r]) {
      const std::string token = format_action(a);
      costs.action_durations[r].push_back(token == "1F0" ? 4.0 : (r == 0 && token == "OPTIMIZER_STEP") ? 3.0 : -1.0);
    }
  }
  const SimulationResult sim = simulate(s, costs);
  expect_span(sim, 0, "0F0", 0, 1);
  expect_span(sim, 1, "1F0", 1, 5);
  expect_span(sim, 1, "1B0", 5, 7);
  expect_span(sim, 0, "0B0", 7, 9);
  expect_span(sim, 0, "OPTIMIZER_STEP", 9, 12);
  EXPECT_DOUBLE_EQ(sim.stats.makespan, 12);
  // A table of the wrong shape is refused.
  costs.action_durations[1].pop_back();
  EXPECT_NE(error_of([&] { simulate(s, costs); }).find("action_durations of rank 1 has"), std::string::npos);
}

TEST(Simulator, RejectsBadCostTables) {
  const Schedule s = one_f_one_b_schedule(2, 2);
  EXPECT_NE(error_of([&] { simulate(s, SimulationCosts::uniform(3)); })
                .find("the cost table has 3 stages but schedule '1f1b' has 2"),
            std::string::npos);
  SimulationCosts negative = SimulationCosts::uniform(2);
  negative.stages[1].backward_weight = -1;
  EXPECT_NE(error_of([&] { simulate(s, negative); }).find("backward-weight cost of stage 1 is -1"), std::string::npos);
  SimulationCosts latency = SimulationCosts::uniform(2);
  latency.p2p_latency = std::numeric_limits<double>::infinity();
  EXPECT_NE(error_of([&] { simulate(s, latency); }).find("p2p latency is inf"), std::string::npos);
}

}  // namespace
}  // namespace cleave::pipeline::simulator_test
