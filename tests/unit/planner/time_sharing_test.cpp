// More ranks than cores, priced from a recorded time_sharing measurement (docs/planner.md, "More ranks than cores";
// engine/planner/step_terms_time_sharing.cpp): compute beyond the ranks' share of the cores by the measured pair's
// excess over its ideal share, and handoffs to descheduled peers (the spinning one) in each meeting's own term (tp
// collectives, pipeline transfers, ZeRO gathers, the gradient reduction): as many per collective as its algorithm's
// phases times the peers each phase waits for that are not running (collective_handoffs). A profile without the key,
// or a layout with no more ranks than cores, prices exactly as before; a pipeline's transfers on more ranks than cores
// wait for their core's holder (core_holder_wait_s) with or without the key, and so does each of ep's meetings for its
// peers' holders (ep_core_holder_wait_s), and each tp collective, cp all-to-all or ring hop for each of its peers'
// holders (peer_core_holder_wait_s). The key round-trips and bad values are refused by name. The figures are
// fixed here (a profile as `cleave profile` writes it), never this machine's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/planner/collective_handoffs.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/microbatch_buckets.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/step_terms.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::time_sharing_test {
namespace {

using partition::MeasuredCosts;

// A 2-core profile measured with 2 ranks, rates only (no block tables), measured collective fits and meeting waits.
HardwareProfile two_cores(bool with_time_sharing) {
  HardwareProfile p;
  p.name = p.source = "recorded";
  p.device_type = DeviceType::kCpu;
  p.flops_f32 = p.flops_bf16 = 3e9;
  p.memory_bandwidth_Bps = 1e30;
  p.intra_node = p.inter_node = Link{2e-5, 2e9};
  p.ranks_per_node = 8;
  p.cores_per_node = 2;
  p.measured_ranks_per_node = 2;
  p.device_memory = 1LL << 30;
  p.measured.ranks = 2;
  p.measured.p2p = partition::AlphaBeta{2, 7e-6, 3e9};
  p.measured.sync_wait_per_meeting_s = 30e-6;
  // Of the kind measured on a 2 vCPU Zen 4 (RESULTS-trial-2026-11-29-f): 2.125x on the shared core, a handoff of
  // 25 us yielding and 500 us spinning (a descheduled peer: the one priced).
  if (with_time_sharing) p.measured.time_sharing = MeasuredCosts::TimeSharing{2, 2.125, 25e-6, 500e-6, "recorded"};
  return p;
}

TEST(TimeShared, TheMeasuredExcessGrowsWithTheRanksPerCoreAndEveryMeetingPaysTheHandoff) {
  const HardwareProfile p = two_cores(true);
  const TimeShared four = time_shared(p, 4);  // 2 ranks per core: the measured pair's whole excess
  EXPECT_DOUBLE_EQ(four.compute, 2.125 / 2);
  EXPECT_DOUBLE_EQ(four.handoff_s, 500e-6);
  const TimeShared three = time_shared(p, 3);  // 1.5 per core: half of it
  EXPECT_DOUBLE_EQ(three.compute, 1 + 0.0625 / 2);
  EXPECT_DOUBLE_EQ(three.handoff_s, 500e-6);
  EXPECT_DOUBLE_EQ(time_shared(p, 8).compute, 2.125 / 2);  // beyond the measured ranks per core: the same excess
  for (int ranks : {1, 2}) {  // no more ranks than cores: nothing
    EXPECT_DOUBLE_EQ(time_shared(p, ranks).compute, 1.0);
    EXPECT_DOUBLE_EQ(time_shared(p, ranks).handoff_s, 0.0);
  }
  EXPECT_DOUBLE_EQ(time_shared(two_cores(false), 4).compute, 1.0);  // not measured: nothing
  EXPECT_DOUBLE_EQ(time_shared(two_cores(false), 4).handoff_s, 0.0);
  HardwareProfile faster = two_cores(true);  // a pair measured under its ideal share is priced at the share
  faster.measured.time_sharing->compute_ratio = 1.75;
  EXPECT_DOUBLE_EQ(time_shared(faster, 4).compute, 1.0);
  HardwareProfile gpu = two_cores(true);  // a device per rank: never oversubscribed
  gpu.cores_per_node = 0;
  EXPECT_DOUBLE_EQ(time_shared(gpu, 4).handoff_s, 0.0);
}

TEST(TimeShared, ACollectiveWaitsAHandoffPerPhaseAndPerPeerThatIsNotRunning) {
  // The engine's all-reduce is two direct phases (reduce-scatter, then all-gather), every other exchange one.
  EXPECT_EQ(exchange_phases(Exchange::kAllReduce), 2);
  for (Exchange e : {Exchange::kReduceScatter, Exchange::kAllGather, Exchange::kAllToAll, Exchange::kPointToPoint}) {
    EXPECT_EQ(exchange_phases(e), 1);
  }
  // 1 + (n - 2)(1 - 1/rho): one handoff for the first peer, each further one not running with probability 1 - 1/rho.
  EXPECT_DOUBLE_EQ(handoffs_per_phase(2, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(handoffs_per_phase(4, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(handoffs_per_phase(3, 1.5), 1.0 + 1.0 / 3);
  EXPECT_DOUBLE_EQ(handoffs_per_phase(8, 4.0), 1.0 + 6 * 0.75);
  EXPECT_DOUBLE_EQ(handoffs_per_phase(1, 2.0), 0.0);  // nobody to wait for
  EXPECT_DOUBLE_EQ(handoffs_per_phase(4, 1.0), 0.0);  // a core per rank: nobody descheduled
  EXPECT_DOUBLE_EQ(collective_handoffs(Exchange::kAllReduce, 2, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(collective_handoffs(Exchange::kAllReduce, 4, 2.0), 4.0);
  EXPECT_DOUBLE_EQ(collective_handoffs(Exchange::kAllGather, 4, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(collective_handoffs(Exchange::kPointToPoint, 8, 2.0), 1.0);  // one peer, whatever the group
  EXPECT_DOUBLE_EQ(time_shared(two_cores(true), 4).ranks_per_core, 2.0);
  EXPECT_DOUBLE_EQ(time_shared(two_cores(true), 3).ranks_per_core, 1.5);
  EXPECT_DOUBLE_EQ(time_shared(two_cores(false), 4).ranks_per_core, 1.0);  // not measured: no handoff priced
}

TEST(TimeShared, MicrobatchBucketsFollowTheEnginesPacking) {
  // Blocks in forward order, packed from the last up to the cap (whole blocks; one larger than the cap alone), a block
  // without parameters skipped, the tied table alone and last.
  EXPECT_EQ(microbatch_buckets({10, 0, 30, 30, 30}, 5, 60), (std::vector<double>{60, 40, 5}));
  EXPECT_EQ(microbatch_buckets({10, 100, 20}, 0, 60), (std::vector<double>{20, 100, 10}));
  EXPECT_EQ(microbatch_buckets({10, 20}, 0, 1e9), (std::vector<double>{30}));
  EXPECT_THROW(microbatch_buckets({10}, 0, 0), Error);
  // Bucket j hidden by the compute before the next launch, at most its own reduction.
  const MicrobatchExposure x = microbatch_exposure({1.0, 1.0, 1.0}, {0.5, 0.0, 3.0});
  EXPECT_DOUBLE_EQ(x.exposed_s, 0.5 + 1.0);
  EXPECT_DOUBLE_EQ(x.hidden_s, 0.5 + 1.0);
  EXPECT_THROW(microbatch_exposure({1.0}, {}), Error);
}

TEST(SettleWait, EachMicrobatchSettleWaitsTheMeasuredRateOfItsComputeOnlyWhereTheBucketPricingApplies) {
  // A constructed context: dp4 ZeRO-2 per micro-batch, 2 micro-batches, ranks outnumbering cores (a handoff priced),
  // a profile that measured 0.25 s of wait per second of compute before a meeting.
  HardwareProfile p = two_cores(true);
  p.measured.sync_wait_per_compute = 0.25;
  PlanChoice choice{1, 1, 4, 1, "1f1b", 1, 2, partition::Recompute::kNone, 8, false};
  TermContext c;
  c.profile = &p;
  c.choice = &choice;
  c.zero = 2;
  c.per_microbatch = true;
  c.handoff_s = 500e-6;
  c.ranks_per_core = 2;
  c.replicas = 4;
  c.micro_batches = 2;
  EXPECT_DOUBLE_EQ(zero2_settle_wait_s(c, 0.020), 0.25 * 0.020);  // 20 ms of F and B at the core sharing: 5 ms
  EXPECT_DOUBLE_EQ(zero2_settle_wait_s(c, 0.0), 0.0);
  // Each condition off prices nothing: the passes meet other peers (pp, tp, cp, ep: their waits count the compute),
  // no per-micro-batch settle (per step, ZeRO-3, one micro-batch, one replica), no time sharing, no measured rate.
  const auto off = [&](auto&& change) {
    TermContext x = c;
    PlanChoice y = choice;
    HardwareProfile q = p;
    x.choice = &y;
    x.profile = &q;
    change(x, y, q);
    return zero2_settle_wait_s(x, 0.020);
  };
  EXPECT_EQ(off([](TermContext&, PlanChoice& y, HardwareProfile&) { y.pp = 2; }), 0.0);
  EXPECT_EQ(off([](TermContext&, PlanChoice& y, HardwareProfile&) { y.tp = 2; }), 0.0);
  EXPECT_EQ(off([](TermContext&, PlanChoice& y, HardwareProfile&) { y.cp = 2; }), 0.0);
  EXPECT_EQ(off([](TermContext&, PlanChoice& y, HardwareProfile&) { y.ep = 2; }), 0.0);
  EXPECT_EQ(off([](TermContext& x, PlanChoice&, HardwareProfile&) { x.per_microbatch = false; }), 0.0);
  EXPECT_EQ(off([](TermContext& x, PlanChoice&, HardwareProfile&) { x.zero = 3; }), 0.0);
  EXPECT_EQ(off([](TermContext& x, PlanChoice&, HardwareProfile&) { x.micro_batches = 1; }), 0.0);
  EXPECT_EQ(off([](TermContext& x, PlanChoice&, HardwareProfile&) { x.replicas = 1; }), 0.0);
  EXPECT_EQ(off([](TermContext& x, PlanChoice&, HardwareProfile&) { x.handoff_s = 0; }), 0.0);
  EXPECT_EQ(off([](TermContext&, PlanChoice&, HardwareProfile& q) { q.measured.sync_wait_per_compute = 0; }), 0.0);
}

TEST(CoreHolder, AReceiverNotRunningWaitsHalfTheHoldersAction) {
  // Recorded inputs: 3 ranks on 2 cores (a receiver is behind another rank 1/3 of the time), 4 on 2 (1/2).
  EXPECT_DOUBLE_EQ(core_holder_wait_s(1.5, 6e-3), (1.0 / 3.0) * 3e-3);
  EXPECT_DOUBLE_EQ(core_holder_wait_s(2.0, 4e-3), 0.5 * 2e-3);
  EXPECT_DOUBLE_EQ(core_holder_wait_s(4.0, 4e-3), 0.75 * 2e-3);
  // No more ranks than cores, or no action: nothing.
  EXPECT_EQ(core_holder_wait_s(1.0, 4e-3), 0.0);
  EXPECT_EQ(core_holder_wait_s(0.5, 4e-3), 0.0);
  EXPECT_EQ(core_holder_wait_s(2.0, 0.0), 0.0);
}

TEST(CoreHolder, TheHoldersActionIsThePipelinesMeanActionOnAWholeCore) {
  // A constructed context: pp2, 1.5 ranks per core, compute priced 1.5 (the cores' share) × 1.2 (the stretch).
  HardwareProfile p = two_cores(false);
  PlanChoice choice{1, 2, 1, 1, "zb_h1", 1, 0, partition::Recompute::kNone, 8, false};
  TermContext c;
  c.profile = &p;
  c.choice = &choice;
  c.compute_stretch = 1.2;
  c.core_sharing = 1.5 * 1.2;
  c.oversubscription = 1.5;
  std::vector<StageCosts> stages(2);
  stages[0].forward[StepTerm::kForward] = 3e-3;
  stages[0].input_grad[StepTerm::kInputGrad] = 3e-3;
  stages[0].input_grad[StepTerm::kRecompute] = 1e-3;
  stages[0].weight_grad[StepTerm::kWeightGrad] = 2e-3;
  stages[1].forward[StepTerm::kForward] = 5e-3;
  stages[1].forward[StepTerm::kKernelLaunch] = 1e-3;
  stages[1].forward[StepTerm::kTensorParallel] = 7e-3;  // not compute: the holder's action is its compute
  stages[1].input_grad[StepTerm::kInputGrad] = 8e-3;
  stages[1].weight_grad[StepTerm::kWeightGrad] = 4e-3;
  // Split backward: 6 actions, 27 ms priced, 4.5 ms each; on a whole core 3 ms. Fused: 4 actions, 6.75 and 4.5 ms.
  EXPECT_NEAR(pipeline_mean_action_s(c, stages), 3e-3, 1e-15);
  TermContext fused = c;
  fused.fused_backward = true;
  EXPECT_NEAR(pipeline_mean_action_s(fused, stages), 4.5e-3, 1e-15);
  // Every transfer waits (1 - 1/1.5) × 3 ms / 2 = 0.5 ms for the holder, with no measured rate and no handoff.
  for (const SendWait& w : point_to_point_sync_wait(c, stages)) {
    EXPECT_NEAR(w.forward_s, 0.5e-3, 1e-15);
    EXPECT_NEAR(w.backward_s, 0.5e-3, 1e-15);
  }
  // No pipeline, or no more ranks than cores: no wait.
  PlanChoice one = choice;
  one.pp = 1;
  TermContext unpiped = c;
  unpiped.choice = &one;
  TermContext undersubscribed = c;
  undersubscribed.oversubscription = 1.0;
  for (const TermContext& x : {unpiped, undersubscribed}) {
    for (const SendWait& w : point_to_point_sync_wait(x, stages)) {
      EXPECT_EQ(w.forward_s, 0.0);
      EXPECT_EQ(w.backward_s, 0.0);
    }
  }
}

// The core-holder tests' context: twice as many ranks as cores (ρ 2), compute priced 2 (the cores' share) × 1.25
// (the stretch); `p` and `choice` outlive it.
TermContext core_holder_context(const HardwareProfile& p, const PlanChoice& choice) {
  TermContext c;
  c.profile = &p;
  c.choice = &choice;
  c.compute_stretch = 1.25;
  c.core_sharing = 2.0 * 1.25;
  c.oversubscription = 2.0;
  return c;
}

// One stage of 20 ms compute as priced: F 8 ms plus 2 ms of `other` compute, I 6 ms, W 4 ms.
std::vector<StageCosts> core_holder_stage(StepTerm other) {
  std::vector<StageCosts> stages(1);
  StageCosts& s = stages[0];
  s.forward[StepTerm::kForward] = 8e-3;
  s.forward[other] = 2e-3;
  s.input_grad[StepTerm::kInputGrad] = 6e-3;
  s.weight_grad[StepTerm::kWeightGrad] = 4e-3;
  return stages;
}

TEST(CoreHolder, EachEpMeetingWaitsForThePeersHoldersOverTheMeanActionBetweenMeetings) {
  // A constructed context: one stage, ep4 on 2 cores (ρ 2).
  const HardwareProfile p = two_cores(false);
  PlanChoice choice{1, 1, 4, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false};
  choice.ep = 4;
  TermContext c = core_holder_context(p, choice);
  std::vector<StageCosts> stages = core_holder_stage(StepTerm::kElementwise);
  StageCosts& s = stages[0];
  s.forward[StepTerm::kExpertAllToAll] = 1e-3;  // not compute
  // Two moe blocks: 4 all-to-alls and 2 count exchanges in F, 4 all-to-alls in I; 10 meetings in all.
  s.ep_meetings = EpMeetings{4, 4, 2, 0, 2};
  s.meetings = 10;
  s.ep_exchange.all_to_all_s = 0.4e-3;
  // 20 ms priced over the share 2 (the stretch kept) = 10 ms on a whole core, 1 ms between meetings; each of the 3
  // peers is behind a computing holder half the time, for half its action: 3 × 0.5 × 0.5 ms = 0.75 ms per meeting.
  EXPECT_NEAR(ep_core_holder_wait_s(c, stages), 0.75e-3, 1e-15);
  add_ep_core_holder_waits(c, stages);
  EXPECT_NEAR(s.forward[StepTerm::kExpertAllToAll], 1e-3 + 4 * 0.75e-3, 1e-15);
  EXPECT_NEAR(s.input_grad[StepTerm::kExpertAllToAll], 4 * 0.75e-3, 1e-15);
  EXPECT_NEAR(s.forward[StepTerm::kCountExchange], 2 * 0.75e-3, 1e-15);
  EXPECT_EQ(s.input_grad[StepTerm::kCountExchange], 0.0);
  // One block's split: its 4 all-to-alls' waits in meetings_s, its count exchange's in count_exchange_s.
  EXPECT_NEAR(s.ep_exchange.meetings_s, 4 * 0.75e-3, 1e-15);
  EXPECT_NEAR(s.ep_exchange.count_exchange_s, 0.75e-3, 1e-15);
  // A pipeline's actions also end a holder's run: pp2 adds 3 per stage (F, I, W): 10 ms over 13.
  PlanChoice piped = choice;
  piped.pp = 2;
  TermContext pc = c;
  pc.choice = &piped;
  EXPECT_NEAR(ep_core_holder_wait_s(pc, stages), 3 * 0.5 * (10e-3 / 13) / 2, 1e-15);
  // ep2 on the same cores: one peer; 3 ranks on 2 cores: 1/3 of the time.
  choice.ep = 2;
  EXPECT_NEAR(ep_core_holder_wait_s(c, stages), 0.25e-3, 1e-15);
  choice.ep = 4;
  c.oversubscription = 1.5;
  EXPECT_NEAR(ep_core_holder_wait_s(c, stages), 3 * (1.0 / 3) * 0.5e-3, 1e-15);
  // No more ranks than cores, or no ep: nothing waits and nothing moves.
  for (const auto& [over, ep] : {std::pair{1.0, 4}, std::pair{2.0, 1}}) {
    c.oversubscription = over;
    choice.ep = ep;
    std::vector<StageCosts> same(1);
    same[0].ep_meetings = EpMeetings{4, 4, 2, 0, 2};
    same[0].meetings = 10;
    same[0].forward[StepTerm::kForward] = 8e-3;
    EXPECT_EQ(ep_core_holder_wait_s(c, same), 0.0);
    add_ep_core_holder_waits(c, same);
    EXPECT_EQ(same[0].forward[StepTerm::kExpertAllToAll], 0.0);
    EXPECT_EQ(same[0].forward[StepTerm::kCountExchange], 0.0);
  }
}

TEST(CoreHolder, EachTpAndCpPeerWaitsForItsHolderOverTheMeanActionBetweenMeetings) {
  // A constructed context: one stage, tp2 × cp2 on 2 cores with 4 ranks (ρ 2).
  const HardwareProfile p = two_cores(false);
  PlanChoice choice{2, 1, 1, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false};
  choice.cp = 2;
  TermContext c = core_holder_context(p, choice);
  std::vector<StageCosts> stages = core_holder_stage(StepTerm::kKernelLaunch);
  StageCosts& s = stages[0];
  s.forward[StepTerm::kTensorParallel] = 1e-3;   // not compute
  s.input_grad[StepTerm::kContextParallel] = 2e-3;
  // 20 meetings: 6 tp all-reduces in F and 6 in I (one peer each), 2 ring hops in F and 6 in I (the neighbour).
  s.meetings = 20;
  s.group_peers = GroupPeers{6, 6, 2, 6};
  // 20 ms priced over the share 2 (the stretch kept) = 10 ms on a whole core, 0.5 ms between meetings; a peer is
  // behind a computing holder half the time, for half its action: 0.5 × 0.25 ms = 0.125 ms per peer.
  EXPECT_NEAR(peer_core_holder_wait_s(c, stages), 0.125e-3, 1e-15);
  add_group_core_holder_waits(c, stages);
  EXPECT_NEAR(s.forward[StepTerm::kTensorParallel], 1e-3 + 6 * 0.125e-3, 1e-15);
  EXPECT_NEAR(s.input_grad[StepTerm::kTensorParallel], 6 * 0.125e-3, 1e-15);
  EXPECT_NEAR(s.forward[StepTerm::kContextParallel], 2 * 0.125e-3, 1e-15);
  EXPECT_NEAR(s.input_grad[StepTerm::kContextParallel], 2e-3 + 6 * 0.125e-3, 1e-15);
  EXPECT_EQ(s.weight_grad[StepTerm::kTensorParallel], 0.0);
  // tp4's all-reduce waits for 3 peers: group_peers counts them (3 per meeting), the wait per peer is the same.
  std::vector<StageCosts> four(1);
  four[0] = stages[0];
  four[0].forward[StepTerm::kTensorParallel] = 0;
  four[0].group_peers = GroupPeers{6 * 3, 0, 0, 0};
  add_group_core_holder_waits(c, four);
  EXPECT_NEAR(four[0].forward[StepTerm::kTensorParallel], 18 * 0.125e-3, 1e-15);
  // A pipeline's actions also end a holder's run: pp2 adds 3 per stage (F, I, W): 10 ms over 23 meetings.
  PlanChoice piped = choice;
  piped.pp = 2;
  TermContext pc = c;
  pc.choice = &piped;
  EXPECT_NEAR(peer_core_holder_wait_s(pc, stages), 0.5 * (10e-3 / 23) / 2, 1e-15);
  // 3 ranks on 2 cores: 1/3 of the time.
  c.oversubscription = 1.5;
  EXPECT_NEAR(peer_core_holder_wait_s(c, stages), (1.0 / 3) * 0.25e-3, 1e-15);
  // No more ranks than cores, or neither tp nor cp: nothing moves.
  for (const auto& [over, width] : {std::pair{1.0, 2}, std::pair{2.0, 1}}) {
    c.oversubscription = over;
    choice.tp = choice.cp = width;
    std::vector<StageCosts> same(1);
    same[0].meetings = 20;
    same[0].group_peers = GroupPeers{6, 6, 2, 6};
    same[0].forward[StepTerm::kForward] = 8e-3;
    add_group_core_holder_waits(c, same);
    EXPECT_EQ(same[0].forward[StepTerm::kTensorParallel], 0.0);
    EXPECT_EQ(same[0].input_grad[StepTerm::kContextParallel], 0.0);
  }
}

class TimeSharing : public testing::ScratchDirTest {
 protected:
  TimeSharing() : ScratchDirTest("cleave_time_sharing_test_") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    config_ = (dir_ / "tiny.json").string();
    std::ofstream(config_) << R"({"model": {"type": "gpt", "vocab_size": 72, "d_model": 40, "n_layers": 4,
      "n_heads": 4, "seq_len": 12}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
  }
  PlanEstimate estimate(const PlanChoice& c, const HardwareProfile& p, int world) const {
    const PlanEstimate e = estimate_plan(config_, {}, c, p, SearchOptions{world, 0});
    EXPECT_TRUE(e.fits) << e.reason;
    return e;
  }
  std::string config_;
};

TEST_F(TimeSharing, OversubscribedTpPlansPayTheExcessOnComputeAndTheHandoffsOfEachCollective) {
  // tp2 dp2 on 4 ranks over 2 cores; micro 2 of a global batch 8: 2 micro-batches a step per replica.
  const PlanChoice c{2, 1, 2, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate without = estimate(c, two_cores(false), 4);
  const PlanEstimate with = estimate(c, two_cores(true), 4);
  ASSERT_TRUE(with.oversubscribed());
  EXPECT_NEAR(with.breakdown.compute_s / without.breakdown.compute_s, 2.125 / 2, 1e-9);
  // Per micro-batch: 2 all-reduces in F and 2 in I per transformer block (4), the vocab-parallel embedding's 1 in F,
  // the lm head's 1 in I and the loss's 2 in F: 20, 40 a step; each a 2-rank all-reduce of two phases, 2 handoffs in
  // the tp term. Each also waits for its peer's
  // core holder (OversubscribedTpAndCpMeetingsWaitForEachPeersCoreHolder), with or without the key alike: the
  // holder's action is its compute on a whole core, which the key's excess does not change.
  ASSERT_GT(with.group_core_holder_wait_s, 0.0);
  EXPECT_NEAR(with.group_core_holder_wait_s, without.group_core_holder_wait_s, 1e-15);
  EXPECT_NEAR(with.breakdown[StepTerm::kTensorParallel] - without.breakdown[StepTerm::kTensorParallel],
              40 * 2 * 500e-6, 1e-9);
  // The gradient all-reduce over the 2 replicas: two phases (no expert reduction without experts).
  EXPECT_NEAR(with.breakdown[StepTerm::kDataParallel] - without.breakdown[StepTerm::kDataParallel], 2 * 500e-6, 1e-9);
  EXPECT_GT(with.step_s, without.step_s);
  EXPECT_NE(oversubscription_warning(with).find("priced from the profile's time sharing"), std::string::npos)
      << oversubscription_warning(with);
  EXPECT_NE(oversubscription_warning(without).find("not priced"), std::string::npos) << oversubscription_warning(without);
}

// More ranks than cores without a time_sharing measurement (no handoffs priced): tp2 dp2, cp2 dp2 (ring and
// all-to-all) and cp4 all-to-all on 4 ranks over 2 cores, against the same plans with a device per rank (no core
// count): the tp or cp term grows by each meeting's peers × the wait per peer, worked out from the plan's own compute
// (per micro-batch on a whole core, over the share 2) over its meetings; the rest of those terms is the same. tp2 or
// cp2 on 2 ranks over the same cores prices every term as with a device per rank, bit for bit.
TEST_F(TimeSharing, OversubscribedTpAndCpMeetingsWaitForEachPeersCoreHolder) {
  HardwareProfile shared = two_cores(false);
  HardwareProfile devices = shared;
  devices.cores_per_node = 0;
  using T = StepTerm;
  struct Case {
    int tp, cp, dp;
    config::ContextParallelComm comm;
    double meetings, peers;  // per micro-batch: the meetings (the holder's yields), the peers they wait for
    T term;
  };
  const auto ring = config::ContextParallelComm::kRing, a2a = config::ContextParallelComm::kAllToAll;
  const Case cases[] = {
      // 4 blocks × (2 all-reduces in F, 2 in I), the vocab-parallel embedding's 1, the lm head's 1 and the loss's 2:
      // 20 meetings of one peer.
      {2, 1, 2, ring, 20, 20, T::kTensorParallel},
      // 4 blocks × (1 hop in F; 1 hop and 2 in I): 16 meetings with the neighbour.
      {1, 2, 2, ring, 16, 16, T::kContextParallel},
      // 4 blocks × (4 all-to-alls in F, 4 in I): 32 meetings; at cp4 each waits for 3 peers.
      {1, 2, 2, a2a, 32, 32, T::kContextParallel},
      {1, 4, 1, a2a, 32, 96, T::kContextParallel},
  };
  for (const Case& k : cases) {
    PlanChoice c{k.tp, 1, k.dp, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
    c.cp = k.cp;
    c.cp_comm = k.comm;
    const PlanEstimate e = estimate(c, shared, 4), own = estimate(c, devices, 4);
    ASSERT_TRUE(e.oversubscribed());
    ASSERT_DOUBLE_EQ(e.core_sharing, 2.0);
    const double micro_batches = 8.0 / 2 / k.dp;
    const double compute = e.breakdown[T::kForward] + e.breakdown[T::kInputGrad] + e.breakdown[T::kWeightGrad] +
                           e.breakdown[T::kElementwise] + e.breakdown[T::kKernelLaunch];
    ASSERT_GT(compute, 0);
    const double each = (1 - 1.0 / 2) * (compute / micro_batches / 2.0 / k.meetings) / 2;
    EXPECT_NEAR(e.group_core_holder_wait_s, each, 1e-15) << c.layout();
    EXPECT_NEAR(e.breakdown[k.term] - own.breakdown[k.term], micro_batches * k.peers * each, 1e-12) << c.layout();
    EXPECT_EQ(own.group_core_holder_wait_s, 0.0);
    EXPECT_NE(oversubscription_warning(e).find("each tp collective, cp all-to-all and cp ring hop waits"),
              std::string::npos) << oversubscription_warning(e);
    // One rank per core: nothing waits, and every term is the device-per-rank plan's.
    if (k.tp * k.cp > 2) continue;
    c.dp = 1;
    const PlanEstimate two = estimate(c, shared, 2), two_own = estimate(c, devices, 2);
    EXPECT_FALSE(two.oversubscribed());
    EXPECT_EQ(two.group_core_holder_wait_s, 0.0);
    EXPECT_EQ(two.step_s, two_own.step_s) << c.layout();
    for (std::size_t t = 0; t < two.breakdown.seconds.size(); ++t) {
      EXPECT_EQ(two.breakdown.seconds[t], two_own.breakdown.seconds[t]) << c.layout() << " term " << t;
    }
  }
}

TEST_F(TimeSharing, Tp4ExchangesWaitTwoHandoffsPerPhaseWithOrWithoutSequenceParallelism) {
  // tp4 on 4 ranks over 2 cores: each phase waits 1 + 2 × (1 - 1/2) = 2 handoffs; an all-reduce is 2 phases, a
  // reduce-scatter or an all-gather 1. Micro 2 of a global batch 8 on one replica: 4 micro-batches. Plain tp: 20
  // all-reduces per micro-batch (4 blocks × 4, the embedding's, the head's, the loss's 2), 80 a step × 4 handoffs.
  // Sequence parallelism: per micro-batch 4 blocks × (4 in F, 4 in I, 2 all-gathers in W), the embedding's 2 and the
  // head's 3 of one phase each (each sample's of one kind posted together: one exchange), the loss's 2 all-reduces:
  // 4 × (45 × 2 + 2 × 4) = 392 handoffs a step.
  for (bool sp : {false, true}) {
    const PlanChoice c{4, 1, 1, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, sp};
    const PlanEstimate with = estimate(c, two_cores(true), 4), without = estimate(c, two_cores(false), 4);
    // Each collective also waits for its 3 peers' core holders, with or without the key alike.
    EXPECT_NEAR(with.group_core_holder_wait_s, without.group_core_holder_wait_s, 1e-15);
    EXPECT_NEAR(with.breakdown[StepTerm::kTensorParallel] - without.breakdown[StepTerm::kTensorParallel],
                (sp ? 392 : 80 * 4) * 500e-6, 1e-9) << "sequence parallel " << sp;
  }
}

TEST_F(TimeSharing, Zero3GathersWaitMoreHandoffsAtMoreRanksPerCore) {
  // dp4 ZeRO-3 on 4 ranks: over 2 cores a gather's phase waits 2 handoffs, over 3 cores (4/3 ranks per core)
  // 1 + 2 × (1 - 3/4) = 1.5; the gathers are the same, so their handoffs' sums are in that ratio.
  HardwareProfile two = two_cores(true), three = two_cores(true);
  three.cores_per_node = 3;
  HardwareProfile two_none = two, three_none = three;
  two_none.measured.time_sharing.reset();
  three_none.measured.time_sharing.reset();
  const PlanChoice c{1, 1, 4, 1, "1f1b", 2, 3, partition::Recompute::kNone, 8, false};
  const auto gathers = [&](const HardwareProfile& p) {
    const PlanEstimate e = estimate(c, p, 4);
    return e.breakdown[StepTerm::kZeroGather] + e.breakdown.hidden[static_cast<std::size_t>(StepTerm::kZeroGather)];
  };
  const double at_two = gathers(two) - gathers(two_none), at_three = gathers(three) - gathers(three_none);
  ASSERT_GT(at_three, 0);
  EXPECT_NEAR(at_two / at_three, 2.0 / 1.5, 1e-9);
  // Each a whole number of gathers at 2 handoffs each.
  const double count = at_two / (2 * 500e-6);
  EXPECT_NEAR(count, std::round(count), 1e-6);
}

TEST_F(TimeSharing, PipelineTransfersAndZero3GathersAreMeetingsToo) {
  HardwareProfile no_wait = two_cores(true);  // the handoff alone, no meeting wait, to isolate it
  no_wait.measured.sync_wait_per_meeting_s = 0;
  HardwareProfile none = no_wait;
  none.measured.time_sharing.reset();
  // pp2 dp2 ZeRO-3 on 4 ranks: each transfer to the other stage and each block's gather waits the handoff.
  const PlanChoice c{1, 2, 2, 1, "1f1b", 2, 3, partition::Recompute::kNone, 8, false};
  const PlanEstimate with = estimate(c, no_wait, 4), without = estimate(c, none, 4);
  const auto idle = [](const PlanEstimate& e) {
    return e.breakdown[StepTerm::kPointToPoint] + e.breakdown[StepTerm::kPointToPointWait] + e.breakdown[StepTerm::kBubble];
  };
  EXPECT_GT(idle(with), idle(without));
  EXPECT_GT(with.breakdown[StepTerm::kZeroGather] + with.breakdown.hidden[static_cast<std::size_t>(StepTerm::kZeroGather)],
            without.breakdown[StepTerm::kZeroGather] + without.breakdown.hidden[static_cast<std::size_t>(StepTerm::kZeroGather)]);
}

TEST_F(TimeSharing, ZeroTwoPerMicrobatchExposesTheBucketTheTableSettles) {
  // dp4 ZeRO-2 per micro-batch on 4 ranks over 2 cores, micro 1 of 8: 2 micro-batches a step per replica. A
  // 4-rank reduce-scatter waits 2 handoffs (1 ms). The tiny gpt ties its table: 2 buckets (the blocks, the table).
  PlanChoice c{1, 1, 4, 1, "1f1b", 1, 2, partition::Recompute::kNone, 8, false};
  c.zero_reduce = config::ZeroReduce::kPerMicrobatch;
  PlanChoice per_step = c;
  per_step.zero_reduce = config::ZeroReduce::kPerStep;
  const auto all = [](const PlanEstimate& e) {
    return e.breakdown[StepTerm::kDataParallel] + e.breakdown.hidden[static_cast<std::size_t>(StepTerm::kDataParallel)];
  };
  const PlanEstimate with = estimate(c, two_cores(true), 4), without = estimate(c, two_cores(false), 4);
  // Each of the 2 reductions a step is 2 meetings of 2 handoffs (the second bucket adds a latency too).
  const double added = all(with) - all(without);
  EXPECT_GE(added, 2 * 2 * 2 * 500e-6 - 1e-9);
  EXPECT_LT(added, 2 * 2 * 2 * 500e-6 + 2e-4);
  // Exposed beyond the per-step plan's one meeting in REDUCE_GRAD: the table's meeting there, and the blocks' bucket
  // of the first micro-batch, which the table's launch settles inside B (at least its 2 handoffs).
  const PlanEstimate step = estimate(per_step, two_cores(true), 4);
  EXPECT_GE(with.breakdown[StepTerm::kDataParallel] - step.breakdown[StepTerm::kDataParallel], 4 * 500e-6 - 1e-9);
  // Untied: one bucket, one meeting per reduction as before, and the last bucket hidden by the next W as before.
  std::ofstream(config_) << R"({"model": {"type": "gpt", "vocab_size": 72, "d_model": 40, "n_layers": 4,
    "n_heads": 4, "seq_len": 12, "tie_embeddings": false}, "batch": {"global_batch_size": 8},
    "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  const PlanEstimate untied = estimate(c, two_cores(true), 4), untied_without = estimate(c, two_cores(false), 4);
  EXPECT_NEAR(all(untied) - all(untied_without), 2 * 2 * 500e-6, 1e-9);
  // The per-step plan and a profile without the key: priced as before this rule (one meeting a reduction).
  EXPECT_NEAR(all(step) - all(estimate(per_step, two_cores(false), 4)), 2 * 500e-6, 1e-9);
}

TEST_F(TimeSharing, ZeroTwoSettleWaitsForThePeersPasses) {
  // dp4 ZeRO-2 per micro-batch on 4 ranks over 2 cores, micro 1 of 8: 2 micro-batches a step per replica, each
  // settled inside its B. With a measured wait of 0.25 s per second of compute, each settle waits 0.25 × that
  // micro-batch's F and B: the step's whole compute × 0.25, in data_parallel, and the step (one stage) by as much.
  PlanChoice c{1, 1, 4, 1, "1f1b", 1, 2, partition::Recompute::kNone, 8, false};
  c.zero_reduce = config::ZeroReduce::kPerMicrobatch;
  HardwareProfile rated = two_cores(true), unrated = two_cores(true);
  rated.measured.sync_wait_per_compute = 0.25;
  const PlanEstimate with = estimate(c, rated, 4), without = estimate(c, unrated, 4);
  ASSERT_GT(with.breakdown.compute_s, 0);
  EXPECT_NEAR(with.breakdown.compute_s, without.breakdown.compute_s, 1e-12);
  EXPECT_NEAR(with.breakdown[StepTerm::kDataParallel] - without.breakdown[StepTerm::kDataParallel],
              0.25 * with.breakdown.compute_s, 1e-9);
  EXPECT_NEAR(with.step_s - without.step_s, 0.25 * with.breakdown.compute_s, 1e-9);
  // Where it does not apply, the rate moves no data_parallel figure: per step (one meeting, after the step), a
  // pipeline (its transfers wait for the passes), one rank per core, and no time_sharing.
  const auto dp_term = [&](const PlanChoice& x, const HardwareProfile& p, int world) {
    return estimate(x, p, world).breakdown[StepTerm::kDataParallel];
  };
  PlanChoice per_step = c;
  per_step.zero_reduce = config::ZeroReduce::kPerStep;
  EXPECT_EQ(dp_term(per_step, rated, 4), dp_term(per_step, unrated, 4));
  PlanChoice pipeline{1, 2, 2, 1, "1f1b", 1, 2, partition::Recompute::kNone, 8, false};
  pipeline.zero_reduce = config::ZeroReduce::kPerMicrobatch;
  EXPECT_EQ(dp_term(pipeline, rated, 4), dp_term(pipeline, unrated, 4));
  PlanChoice dp2 = c;
  dp2.dp = 2;
  EXPECT_EQ(dp_term(dp2, rated, 2), dp_term(dp2, unrated, 2));
  HardwareProfile rated_none = rated, unrated_none = unrated;
  rated_none.measured.time_sharing.reset();
  unrated_none.measured.time_sharing.reset();
  EXPECT_EQ(dp_term(c, rated_none, 4), dp_term(c, unrated_none, 4));
}

TEST_F(TimeSharing, OversubscribedPipelinesWaitForTheCoresHolderAtEveryTransferWithOrWithoutTheKey) {
  // pp2 dp2 on 4 ranks over 2 cores: every transfer's receiver waits (1 - 1/2) × half the pipeline's mean action on a
  // whole core, in point_to_point_wait, whether or not the profile measured time_sharing (the mechanism needs only the
  // cores). No measured meeting rate here, so without the rule no transfer waited at all.
  const PlanChoice c{1, 2, 2, 1, "1f1b", 2, 1, partition::Recompute::kNone, 8, false};
  for (bool key : {false, true}) {
    const PlanEstimate e = estimate(c, two_cores(key), 4);
    ASSERT_TRUE(e.oversubscribed());
    EXPECT_GT(e.core_holder_wait_s, 0);
    EXPECT_GT(e.breakdown[StepTerm::kPointToPointWait], 0) << "time_sharing " << key;
    EXPECT_NE(oversubscription_warning(e).find("for the rank holding its core"), std::string::npos)
        << oversubscription_warning(e);
  }
  // The same pipeline on 2 ranks (one per core), a pipeline-free plan on 4, and a device per rank: no wait.
  const PlanChoice pp2{1, 2, 1, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate fits = estimate(pp2, two_cores(false), 2);
  EXPECT_EQ(fits.core_holder_wait_s, 0.0);
  EXPECT_EQ(fits.breakdown[StepTerm::kPointToPointWait], 0.0);
  const PlanChoice dp4{1, 1, 4, 1, "1f1b", 2, 1, partition::Recompute::kNone, 8, false};
  EXPECT_EQ(estimate(dp4, two_cores(false), 4).core_holder_wait_s, 0.0);
  HardwareProfile gpu = two_cores(false);
  gpu.cores_per_node = 0;
  const PlanEstimate devices = estimate(c, gpu, 4);
  EXPECT_EQ(devices.core_holder_wait_s, 0.0);
  EXPECT_EQ(devices.breakdown[StepTerm::kPointToPointWait], 0.0);
}

TEST_F(TimeSharing, WithoutMoreRanksThanCoresOrWithoutTheKeyNothingMoves) {
  const PlanChoice c{2, 1, 1, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate with = estimate(c, two_cores(true), 2), without = estimate(c, two_cores(false), 2);
  EXPECT_FALSE(with.oversubscribed());
  EXPECT_EQ(with.step_s, without.step_s);  // bit for bit
  for (std::size_t t = 0; t < with.breakdown.seconds.size(); ++t) EXPECT_EQ(with.breakdown.seconds[t], without.breakdown.seconds[t]);
}

TEST_F(TimeSharing, TheKeyRoundTripsAndBadValuesAreRefusedByName) {
  const HardwareProfile p = two_cores(true);
  const std::string path = (dir_ / "p.json").string();
  std::ofstream(path) << profile_to_json(p).dump(2);
  const HardwareProfile loaded = load_profile(path);
  ASSERT_TRUE(loaded.measured.time_sharing.has_value());
  EXPECT_EQ(loaded.measured.time_sharing->ranks_per_core, 2);
  EXPECT_DOUBLE_EQ(loaded.measured.time_sharing->compute_ratio, 2.125);
  EXPECT_NEAR(loaded.measured.time_sharing->handoff_s, 25e-6, 1e-18);
  EXPECT_NEAR(loaded.measured.time_sharing->handoff_spin_s, 500e-6, 1e-15);
  EXPECT_EQ(loaded.measured.time_sharing->method, "recorded");
  EXPECT_EQ(profile_to_json(loaded).dump(), profile_to_json(p).dump());
  const std::string without = (dir_ / "without.json").string();
  std::ofstream(without) << profile_to_json(two_cores(false)).dump();
  EXPECT_FALSE(load_profile(without).measured.time_sharing.has_value());
  EXPECT_FALSE(profile_to_json(two_cores(false))["measured"].contains("time_sharing"));
  auto bad = profile_to_json(p);
  bad["measured"]["time_sharing"]["ranks_per_core"] = 1;
  std::ofstream((dir_ / "bad.json").string()) << bad.dump();
  try {
    load_profile((dir_ / "bad.json").string());
    FAIL() << "ranks_per_core 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("time_sharing: 'ranks_per_core' must be >= 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::planner::time_sharing_test
