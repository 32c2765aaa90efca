// The predicted step term by term (engine/planner/step_breakdown.hpp, step_terms.hpp): for every plan the search
// ranks, on a profile where every term costs something, the terms sum to the predicted step and the block rows to
// the compute terms; each term appears where its lever is and only there (tp, cp, ep, ZeRO, dp, recomputation, P2P,
// bubble); the hidden time (ring hops, ZeRO-3 prefetch) is reported beside the sum, not in it; the --explain table
// has a row per term and a total equal to the step; the pipeline's transfers wait for their senders' lost time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "engine/config/config.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/step_breakdown.hpp"
#include "engine/planner/step_terms.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "support/scratch_dir_test.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::step_breakdown_test {
namespace {

namespace fs = std::filesystem;
using T = StepTerm;

class StepBreakdownTest : public testing::ScratchDirTest {
 protected:
  StepBreakdownTest() : ScratchDirTest("cleave_step_breakdown_test_") {}

  void SetUp() override {
    ScratchDirTest::SetUp();
    config_ = (dir_ / "tiny.json").string();
    std::ofstream(config_) << R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 48, "n_layers": 4,
      "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
  }

  // Every term costs time: compute at 1 GFLOP/s, links with latency and finite bandwidth, a slow memory.
  // Two ranks a node: world 4 spans two nodes, so the inter-node link is used too.
  static HardwareProfile costly() {
    return testing::synthetic_profile(1e9, 1e9, Link{2e-5, 1e9}, Link{5e-5, 1e8}, 2);
  }
  PlanEstimate estimate(PlanChoice c, const HardwareProfile& p = costly(), int world = 4) {
    c.global_batch = 8;
    PlanEstimate e = estimate_plan(config_, {}, c, p, SearchOptions{world, 0});
    EXPECT_TRUE(e.valid) << c.layout() << ": " << e.reason;
    return e;
  }
  static void expect_sums(const PlanEstimate& e) {
    const StepBreakdown& b = e.breakdown;
    EXPECT_NEAR(b.total(), e.step_s, 1e-9 * e.step_s) << e.choice.layout() << " " << e.choice.schedule;
    EXPECT_NEAR(b.compute_s + b.tp_comm_s + b.idle_s + b.dp_comm_s + b.optimizer_s, e.step_s, 1e-9 * e.step_s);
    double blocks = 0;
    for (const auto& k : b.blocks) blocks += k.forward_s + k.input_grad_s + k.weight_grad_s + k.recompute_s;
    EXPECT_NEAR(blocks, b[T::kForward] + b[T::kInputGrad] + b[T::kWeightGrad] + b[T::kRecompute], 1e-9 * e.step_s);
    double elementwise = 0, launch = 0;
    for (const auto& k : b.blocks) elementwise += k.elementwise_total(), launch += k.launch_total();
    EXPECT_NEAR(elementwise, b[T::kElementwise], 1e-9 * e.step_s);
    EXPECT_NEAR(launch, b[T::kKernelLaunch], 1e-9 * e.step_s);
    for (int t = 0; t < kNumStepTerms; ++t) {
      EXPECT_GE(b.seconds[static_cast<std::size_t>(t)], 0.0) << step_term_info(static_cast<StepTerm>(t)).name;
      EXPECT_GE(b.hidden[static_cast<std::size_t>(t)], 0.0);
    }
  }

  std::string config_;
};

TEST_F(StepBreakdownTest, TermsSumToTheStepForEveryRankedPlan) {
  const SearchResult r = search_plans(config_, {}, costly(), SearchOptions{4, 0});
  ASSERT_GT(r.ranked.size(), 100u);
  int pipelined = 0;
  for (const auto& e : r.ranked) {
    expect_sums(e);
    pipelined += e.choice.pp > 1;
  }
  EXPECT_GT(pipelined, 0);
}

// On the shipped H100 roofline profile every ranked plan (recomputation, pipelining and tp among them) splits its compute
// into GEMMs, elementwise traffic and kernel launches that still sum to the step, the last two non-zero on every plan.
TEST_F(StepBreakdownTest, TermsSumToTheStepOnARooflineProfile) {
  const HardwareProfile h100 = partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
  const SearchResult r = search_plans(config_, {}, h100, SearchOptions{4, 0});
  ASSERT_GT(r.ranked.size(), 10u);
  for (const auto& e : r.ranked) {
    expect_sums(e);
    EXPECT_GT(e.breakdown[T::kElementwise], 0.0) << e.choice.layout();
    EXPECT_GT(e.breakdown[T::kKernelLaunch], 0.0) << e.choice.layout();
  }
}

// A moe model: every plan the search ranks, ep 1, 2 and 4 among them, sums to its step; the expert all-to-alls
// appear exactly where ep > 1, and the busiest ep rank's expert GEMMs make its compute grow with the imbalance.
TEST_F(StepBreakdownTest, TermsSumToTheStepForEveryRankedEpPlan) {
  const std::string moe = (dir_ / "moe.json").string();
  std::ofstream(moe) << R"({"model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4,
      "seq_len": 16, "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2}, "batch": {"global_batch_size": 8},
      "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  const SearchResult r = search_plans(moe, {}, costly(), SearchOptions{4, 0});
  std::set<int> eps;
  for (const auto& e : r.ranked) {
    expect_sums(e);
    eps.insert(e.choice.ep);
    if (e.choice.ep > 1) {
      EXPECT_GT(e.breakdown[T::kExpertAllToAll], 0.0) << e.choice.layout();
      EXPECT_GT(e.ep_all_to_all_s, 0.0) << e.choice.layout();
    } else {
      EXPECT_EQ(e.breakdown[T::kExpertAllToAll], 0.0) << e.choice.layout();
    }
    EXPECT_EQ(e.breakdown.hidden[static_cast<std::size_t>(T::kExpertAllToAll)], 0.0);
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));
  // One plan at ep 2: one moe block's four all-to-alls, per micro-batch, times the blocks and micro-batches (pp 1).
  PlanChoice c = choice_of_config(moe, {}, 4);
  c.ep = 2;
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.5;
  const PlanEstimate hot = estimate_plan(moe, {}, c, costly(), options);
  ASSERT_TRUE(hot.valid) << hot.reason;
  expect_sums(hot);
  const double micro_batches = 8.0 / c.dp / c.micro_batch;
  EXPECT_NEAR(hot.breakdown[T::kExpertAllToAll], 2 * micro_batches * hot.ep_all_to_all_s, 1e-9 * hot.step_s);
  options.ep_imbalance = 1.0;
  const PlanEstimate even = estimate_plan(moe, {}, c, costly(), options);
  expect_sums(even);
  EXPECT_GT(hot.breakdown[T::kForward], even.breakdown[T::kForward]);
  EXPECT_GT(hot.breakdown[T::kExpertAllToAll], even.breakdown[T::kExpertAllToAll]);
  EXPECT_EQ(hot.breakdown[T::kDataParallel], even.breakdown[T::kDataParallel]);
}

TEST_F(StepBreakdownTest, EachTermAppearsWithItsLever) {
  using partition::Recompute;
  // dp4, ZeRO 0, no recomputation: compute, the dp all-reduce and the optimizer only.
  const PlanEstimate dp = estimate(PlanChoice{1, 1, 4, 1, "1f1b", 2, 0, Recompute::kNone, 8, false});
  expect_sums(dp);
  EXPECT_GT(dp.breakdown[T::kForward], 0.0);
  EXPECT_GT(dp.breakdown[T::kDataParallel], 0.0);
  EXPECT_GT(dp.breakdown[T::kOptimizer], 0.0);
  for (T t : {T::kRecompute, T::kTensorParallel, T::kContextParallel, T::kExpertAllToAll, T::kZeroGather,
              T::kPointToPoint, T::kBubble}) {
    EXPECT_EQ(dp.breakdown[t], 0.0) << step_term_info(t).name;
  }
  // The same with ZeRO-3 and full recomputation: the gathers, some hidden by the prefetch; the rerun forward.
  const PlanEstimate z3 = estimate(PlanChoice{1, 1, 4, 1, "1f1b", 2, 3, Recompute::kFull, 8, false,
                                              config::ZeroReduce::kPerStep});
  expect_sums(z3);
  EXPECT_GT(z3.breakdown[T::kZeroGather], 0.0);
  EXPECT_GT(z3.breakdown.hidden[static_cast<std::size_t>(T::kZeroGather)], 0.0);
  EXPECT_GT(z3.breakdown[T::kRecompute], 0.0);
  EXPECT_NEAR(z3.breakdown[T::kForward], dp.breakdown[T::kForward], 1e-12);  // recomputation is not forward
  // tp2: the all-reduces; full recomputation reruns them too (6 per block against 4).
  const PlanEstimate tp = estimate(PlanChoice{2, 1, 2, 1, "1f1b", 2, 0, Recompute::kNone, 8, false});
  const PlanEstimate tp_full = estimate(PlanChoice{2, 1, 2, 1, "1f1b", 2, 0, Recompute::kFull, 8, false});
  expect_sums(tp);
  EXPECT_GT(tp.breakdown[T::kTensorParallel], 0.0);
  EXPECT_GT(tp_full.breakdown[T::kTensorParallel], tp.breakdown[T::kTensorParallel]);
  // cp2 with all_to_all: the exchange, nothing hidden; with the ring, some of it hidden behind compute.
  PlanChoice cp{1, 1, 2, 1, "1f1b", 2, 0, Recompute::kNone, 8, false};
  cp.cp = 2;
  cp.cp_comm = config::ContextParallelComm::kAllToAll;
  const PlanEstimate a2a = estimate(cp);
  expect_sums(a2a);
  EXPECT_GT(a2a.breakdown[T::kContextParallel], 0.0);
  EXPECT_EQ(a2a.breakdown.hidden[static_cast<std::size_t>(T::kContextParallel)], 0.0);
  cp.cp_comm = config::ContextParallelComm::kRing;
  const PlanEstimate ring = estimate(cp);
  expect_sums(ring);
  EXPECT_GT(ring.breakdown[T::kContextParallel], 0.0);  // the dK/dV hops are never hidden
  EXPECT_GT(ring.breakdown.hidden[static_cast<std::size_t>(T::kContextParallel)], 0.0);
  // pp4 1f1b: bubble, and P2P over the slow inter-node link; free links leave the bubble alone.
  const PlanEstimate pp = estimate(PlanChoice{1, 4, 1, 1, "1f1b", 1, 0, Recompute::kNone, 8, false});
  expect_sums(pp);
  EXPECT_GT(pp.breakdown[T::kBubble], 0.0);
  EXPECT_GT(pp.breakdown[T::kPointToPoint], 0.0);
  HardwareProfile free_p2p = costly();
  free_p2p.intra_node = free_p2p.inter_node = Link{0, 0};
  const PlanEstimate pp_free = estimate(PlanChoice{1, 4, 1, 1, "1f1b", 1, 0, Recompute::kNone, 8, false}, free_p2p);
  EXPECT_EQ(pp_free.breakdown[T::kPointToPoint], 0.0);
  EXPECT_NEAR(pp_free.step_s, pp.step_s - pp.breakdown[T::kPointToPoint], 1e-9 * pp.step_s);
}

// The overlapped transfers' timing (step_terms.hpp): a reduction trails the backward block by block, a gather leads
// the forward; exposed is what the last transfer (reduction) or the waits for gathers add to the compute.
TEST(OverlappedTransfers, ExposeOnlyWhatTheComputeCannotHide) {
  // Compute longer than each transfer: only the last reduction (it starts when the backward ends) and the first
  // gather (the forward waits for it) are exposed.
  EXPECT_DOUBLE_EQ(overlapped_reduction_s({1, 1, 1}, {2, 2, 2}), 1.0);
  EXPECT_DOUBLE_EQ(overlapped_gather_s({1, 1, 1}, {2, 2, 2}), 1.0);
  // Transfers longer than the compute: they queue; the backward ends at 1.5, the last reduction at 3.5.
  EXPECT_DOUBLE_EQ(overlapped_reduction_s({1, 1, 1}, {0.5, 0.5, 0.5}), 2.0);
  EXPECT_DOUBLE_EQ(overlapped_gather_s({1, 1, 1}, {0.5, 0.5, 0.5}), 2.0);
  // Never more than the transfers in sequence, never negative; nothing to transfer exposes nothing.
  EXPECT_DOUBLE_EQ(overlapped_reduction_s({1, 2}, {0, 0}), 3.0);
  EXPECT_DOUBLE_EQ(overlapped_gather_s({1, 2}, {0, 0}), 3.0);
  EXPECT_DOUBLE_EQ(overlapped_reduction_s({0, 0}, {1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(overlapped_gather_s({}, {}), 0.0);
}

// --overlap-grad-reduce: the dp reduction (and ZeRO-1's parameter gather) move from the step's sum into its hidden
// time, part of them; --tp-comm-overlap does the same for the tp collectives. The terms still sum to the step.
TEST_F(StepBreakdownTest, OverlapOptionsHideCommunicationBehindCompute) {
  using partition::Recompute;
  const std::size_t dp_at = static_cast<std::size_t>(T::kDataParallel);
  const std::size_t gather_at = static_cast<std::size_t>(T::kZeroGather);
  const std::size_t tp_at = static_cast<std::size_t>(T::kTensorParallel);
  SearchOptions plain{4, 0}, overlap{4, 0};
  overlap.overlap_grad_reduce = true;
  for (int zero : {0, 1, 3}) {
    PlanChoice c{1, 1, 4, 1, "1f1b", 2, zero, Recompute::kNone, 8, false, config::ZeroReduce::kPerStep};
    c.global_batch = 8;
    const PlanEstimate before = estimate_plan(config_, {}, c, costly(), plain);
    const PlanEstimate after = estimate_plan(config_, {}, c, costly(), overlap);
    ASSERT_TRUE(before.valid && after.valid) << before.reason << after.reason;
    expect_sums(after);
    EXPECT_EQ(before.breakdown.hidden[dp_at], 0.0) << "ZeRO " << zero;
    EXPECT_GT(after.breakdown.hidden[dp_at], 0.0) << "ZeRO " << zero;
    EXPECT_LT(after.breakdown[T::kDataParallel], before.breakdown[T::kDataParallel]) << "ZeRO " << zero;
    EXPECT_GT(after.breakdown[T::kDataParallel], 0.0) << "ZeRO " << zero;  // the first block's reduction trails
    EXPECT_NEAR(after.breakdown[T::kDataParallel] + after.breakdown.hidden[dp_at], before.breakdown[T::kDataParallel],
                1e-9 * before.step_s);
    EXPECT_LT(after.step_s, before.step_s) << "ZeRO " << zero;
    if (zero == 1) {  // the parameter gather after the step overlaps the next forward
      EXPECT_GT(after.breakdown.hidden[gather_at], 0.0);
      EXPECT_LT(after.breakdown[T::kZeroGather], before.breakdown[T::kZeroGather]);
    }
  }
  // tp2 with sequence parallelism: the reduce-scatters and all-gathers hide under their block's compute.
  PlanChoice tp{2, 1, 2, 1, "1f1b", 2, 0, Recompute::kNone, 8, true};
  tp.global_batch = 8;
  SearchOptions tp_overlap{4, 0};
  tp_overlap.overlap_tp_comm = true;
  const PlanEstimate exposed = estimate_plan(config_, {}, tp, costly(), plain);
  const PlanEstimate hidden = estimate_plan(config_, {}, tp, costly(), tp_overlap);
  ASSERT_TRUE(exposed.valid && hidden.valid);
  expect_sums(hidden);
  EXPECT_GT(hidden.breakdown.hidden[tp_at], 0.0);
  EXPECT_LT(hidden.breakdown[T::kTensorParallel], exposed.breakdown[T::kTensorParallel]);
  EXPECT_NEAR(hidden.breakdown[T::kForward], exposed.breakdown[T::kForward], 1e-12);  // compute is unchanged
  EXPECT_LT(hidden.step_s, exposed.step_s);
}

// ZeRO-1's parameter all-gather after the step: the engine gathers the f32 master values; with param_gather_bf16
// (Megatron-LM's distributed optimizer) a bf16 run gathers its bf16 parameters, half the bytes, and nothing else
// moves. An f32 run has no bf16 parameters to gather: the option changes nothing there.
// Megatron-Core's tp overlap, pass by pass on a constructed block (tensor_parallel_overlap): each pass's
// collectives hide under that pass's compute at the core sharing, F's under F, I's under I less what the ring hid
// beyond the rerun, the rerun's under the rerun, W's (sequence parallelism's input all-gathers for the weight
// gradients) under W; what does not fit stays exposed, and the option off changes nothing.
TEST(TensorParallelOverlap, EachPassHidesUnderItsOwnCompute) {
  PlanChoice choice{2, 1, 1, 1, "1f1b", 1, 0, partition::Recompute::kFull, 8, true};
  SearchOptions options{2, 0};
  options.overlap_tp_comm = true;
  TermContext c;
  c.choice = &choice;
  c.options = &options;
  c.core_sharing = 2.0;
  BlockCollectives tp;
  tp.forward_s = 3e-3, tp.backward_s = 5e-3, tp.rerun_s = 1e-3, tp.weight_grad_s = 4e-3;
  BlockCompute compute;
  compute.forward_s = 1e-3, compute.input_grad_s = 4e-3, compute.recompute_s = 1e-3, compute.weight_grad_s = 1e-3;
  BlockCollectives cp;
  cp.hidden_forward_s = 0.5e-3, cp.hidden_backward_s = 2.5e-3;  // the ring took 0.5 ms of F and 0.5 ms of I
  const BlockCollectives x = tensor_parallel_overlap(c, tp, compute, cp);
  EXPECT_DOUBLE_EQ(x.forward_s, 3e-3 - (2e-3 - 0.5e-3));
  EXPECT_DOUBLE_EQ(x.backward_s, 0.0);  // 5 ms under 8 ms of I less the ring's 0.5 ms beyond the rerun
  EXPECT_DOUBLE_EQ(x.rerun_s, 0.0);
  EXPECT_DOUBLE_EQ(x.weight_grad_s, 4e-3 - 2e-3);
  EXPECT_DOUBLE_EQ(x.hidden_forward_s, 1.5e-3);
  EXPECT_DOUBLE_EQ(x.hidden_backward_s, 5e-3 + 1e-3);
  EXPECT_DOUBLE_EQ(x.hidden_weight_s, 2e-3);
  options.overlap_tp_comm = false;
  const BlockCollectives off = tensor_parallel_overlap(c, tp, compute, cp);
  EXPECT_EQ(off.weight_grad_s, tp.weight_grad_s);
  EXPECT_EQ(off.hidden_weight_s, 0.0);
}

TEST_F(StepBreakdownTest, ParamGatherInBf16MovesHalfTheBytes) {
  const std::size_t gather_at = static_cast<std::size_t>(T::kZeroGather);
  PlanChoice c{1, 1, 4, 1, "1f1b", 2, 1, partition::Recompute::kNone, 8, false, config::ZeroReduce::kPerStep};
  c.global_batch = 8;
  SearchOptions f32{4, 0}, bf16{4, 0};
  bf16.param_gather_bf16 = true;
  HardwareProfile p = costly();
  p.intra_node.latency_s = p.inter_node.latency_s = 0;  // bytes alone: the gather's time halves exactly
  const PlanEstimate full = estimate_plan(config_, {"device.precision=bf16"}, c, p, f32);
  const PlanEstimate half = estimate_plan(config_, {"device.precision=bf16"}, c, p, bf16);
  ASSERT_TRUE(full.valid && half.valid) << full.reason << half.reason;
  expect_sums(half);
  ASSERT_GT(full.breakdown[T::kZeroGather], 0.0);
  EXPECT_NEAR(half.breakdown[T::kZeroGather], full.breakdown[T::kZeroGather] / 2, 1e-12 * full.step_s);
  EXPECT_EQ(half.breakdown.hidden[gather_at], 0.0);
  EXPECT_DOUBLE_EQ(half.breakdown[T::kDataParallel], full.breakdown[T::kDataParallel]);  // gradients stay f32
  EXPECT_DOUBLE_EQ(half.breakdown[T::kForward], full.breakdown[T::kForward]);
  EXPECT_LT(half.comm_bytes, full.comm_bytes);
  const PlanEstimate f32_run = estimate_plan(config_, {}, c, p, bf16);
  const PlanEstimate f32_plain = estimate_plan(config_, {}, c, p, f32);
  ASSERT_TRUE(f32_run.valid && f32_plain.valid);
  EXPECT_DOUBLE_EQ(f32_run.breakdown[T::kZeroGather], f32_plain.breakdown[T::kZeroGather]);
}

// The optimizer term prices the trainer's OPTIMIZER_STEP (engine/train/step_tail.hpp), not the update alone: at the
// profile's measured rates, the update over what the rank updates (its ZeRO shard), the exact norm over its share
// of the gradients (with dp its dp shard, ZeRO or not), the clip's scale over what it updates when
// optimizer.grad_clip > 0. A profile without the norm and clip rates (written before they were timed) prices the
// update alone, as before.
TEST_F(StepBreakdownTest, OptimizerPricesTheNormAndClipAsTheTrainerRunsThem) {
  HardwareProfile p = costly();
  p.measured.adamw_s_per_param = 2e-9, p.measured.sgd_s_per_param = p.measured.sgd_momentum_s_per_param = 1e-9;
  HardwareProfile old = p;  // a profile from before: the update's rate only
  p.measured.grad_norm_s_per_param = 1e-9, p.measured.grad_clip_s_per_param = 0.5e-9;
  const auto optimizer_s = [&](const HardwareProfile& profile, int zero, const std::string& clip) {
    PlanChoice c{1, 1, 4, 1, "1f1b", 2, zero, partition::Recompute::kNone, 8, false};
    c.global_batch = 8;
    const PlanEstimate e = estimate_plan(config_, {"optimizer.grad_clip=" + clip}, c, profile, SearchOptions{4, 0});
    EXPECT_TRUE(e.valid) << e.reason;
    expect_sums(e);
    return e.breakdown[T::kOptimizer];
  };
  // The update alone: the rank's parameters (ZeRO-1: a quarter of them) at 2 ns, x the core sharing.
  const double update0 = optimizer_s(old, 0, "1"), update1 = optimizer_s(old, 1, "1");
  ASSERT_GT(update0, 0.0);
  EXPECT_NEAR(update1, update0 / 4, 1e-9 * update0);
  const double per_param = update0 / 2e-9;  // parameters x core sharing
  // dp4, ZeRO 0: the norm over a quarter of the gradients, the clip over all of them.
  EXPECT_NEAR(optimizer_s(p, 0, "1"), per_param * (2e-9 + 1e-9 / 4 + 0.5e-9), 1e-9 * update0);
  EXPECT_NEAR(optimizer_s(p, 0, "0"), per_param * (2e-9 + 1e-9 / 4), 1e-9 * update0);  // no clipping
  // ZeRO-1: everything over the shard.
  EXPECT_NEAR(optimizer_s(p, 1, "1"), per_param / 4 * (2e-9 + 1e-9 + 0.5e-9), 1e-9 * update0);
}

// Waits at meetings (step_terms_sync_wait.cpp): with the profile's measured wait per second of compute, a block whose
// passes meet peers (cp's exchange, tp's all-reduces) waits that rate × its pass compute, in the term of its last
// meeting; blocks that meet nobody (embedding, head) and a plan without meetings inside passes (dp) are unchanged.
// The compute stretch (mean over median of short compute) scales the compute terms and not the optimizer's.
TEST_F(StepBreakdownTest, MeetingsWaitForThePeersLostTimeAndTheStretchScalesCompute) {
  const HardwareProfile before = costly();
  HardwareProfile meet = before;
  meet.measured.sync_wait_per_compute = 0.5;
  PlanChoice cp{1, 1, 2, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  cp.cp = 2;
  cp.cp_comm = config::ContextParallelComm::kAllToAll;
  const PlanChoice tp{2, 1, 2, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  for (const auto& [choice, term] : {std::pair{cp, T::kContextParallel}, std::pair{tp, T::kTensorParallel}}) {
    const PlanEstimate a = estimate(choice, before), b = estimate(choice, meet);
    expect_sums(b);
    // The transformer blocks' passes (1f1b fuses W into B: it comes before a meeting too), with their elementwise
    // and launch parts (under cp the attention core's own streams: cp_core_compute).
    double blocks = 0, all = 0;
    for (const auto& k : a.breakdown.blocks) {
      const double passes =
          k.forward_s + k.input_grad_s + k.weight_grad_s + k.recompute_s + k.elementwise_total() + k.launch_total();
      all += passes;
      if (k.block == "transformer_block") blocks += passes;
    }
    ASSERT_GT(blocks, 0.0);
    const double added = b.breakdown[term] - a.breakdown[term];
    if (term == T::kContextParallel) {  // only attention meets under cp
      EXPECT_NEAR(added, 0.5 * blocks, 1e-9 * a.step_s);
    } else {  // tp: the vocab-parallel embedding's all-reduce is a meeting in its F too; the final norm meets nobody
      EXPECT_GE(added, 0.5 * blocks - 1e-9 * a.step_s);
      EXPECT_LE(added, 0.5 * all + 1e-9 * a.step_s);
    }
    EXPECT_NEAR(b.breakdown[T::kForward], a.breakdown[T::kForward], 1e-12) << choice.layout();
    EXPECT_NEAR(b.step_s - a.step_s, added, 1e-9 * a.step_s) << choice.layout();
  }
  const PlanChoice dp{1, 1, 4, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  EXPECT_DOUBLE_EQ(estimate(dp, meet).step_s, estimate(dp, before).step_s);
  HardwareProfile stretched = before;
  stretched.measured.compute_stretch = 0.25;
  const PlanEstimate plain = estimate(dp, before), slow = estimate(dp, stretched);
  expect_sums(slow);
  EXPECT_NEAR(slow.breakdown[T::kForward], 1.25 * plain.breakdown[T::kForward], 1e-9 * plain.step_s);
  EXPECT_NEAR(slow.breakdown[T::kWeightGrad], 1.25 * plain.breakdown[T::kWeightGrad], 1e-9 * plain.step_s);
  EXPECT_NEAR(slow.breakdown[T::kOptimizer], plain.breakdown[T::kOptimizer], 1e-12);
}

// A step computed as one stream (step_terms.hpp, streams_the_step): with the profile's stream_stretch, the compute of
// a plan whose ranks meet nobody inside the step (dp only, ZeRO 0/1, or ZeRO-2 over one micro-batch) is priced that
// much longer, the optimizer not; a plan that meets inside its passes (tp, pp, ZeRO-3's gathers) or every
// micro-batch (ZeRO-2 per micro-batch over 2) keeps the short compute's stretch. Without the key nothing changes.
TEST_F(StepBreakdownTest, StreamStretchPricesTheStepsWhoseRanksMeetNobody) {
  const HardwareProfile before = costly();
  HardwareProfile streamed = before;
  streamed.measured.stream_stretch = 1.5;
  const auto choice = [](int tp, int pp, int dp, std::int64_t micro, int zero, config::ZeroReduce reduce) {
    PlanChoice c{tp, pp, dp, 1, "1f1b", micro, zero, partition::Recompute::kNone, 8, false};
    c.zero_reduce = reduce;
    return c;
  };
  using Z = config::ZeroReduce;
  for (const PlanChoice& c : {choice(1, 1, 4, 1, 0, Z::kAuto), choice(1, 1, 4, 1, 1, Z::kAuto),
                              choice(1, 1, 4, 1, 2, Z::kPerStep), choice(1, 1, 4, 2, 2, Z::kPerMicrobatch)}) {
    const PlanEstimate plain = estimate(c, before), slow = estimate(c, streamed);
    expect_sums(slow);
    EXPECT_NEAR(slow.breakdown[T::kForward], 2.5 * plain.breakdown[T::kForward], 1e-9 * plain.step_s) << c.zero_label();
    EXPECT_NEAR(slow.breakdown[T::kWeightGrad], 2.5 * plain.breakdown[T::kWeightGrad], 1e-9 * plain.step_s);
    EXPECT_NEAR(slow.breakdown[T::kOptimizer], plain.breakdown[T::kOptimizer], 1e-12) << c.zero_label();
  }
  for (const PlanChoice& c : {choice(1, 1, 4, 1, 2, Z::kPerMicrobatch), choice(1, 1, 4, 1, 3, Z::kPerMicrobatch),
                              choice(2, 1, 2, 1, 1, Z::kAuto), choice(1, 2, 2, 1, 1, Z::kAuto)}) {
    EXPECT_DOUBLE_EQ(estimate(c, streamed).step_s, estimate(c, before).step_s) << c.layout() << " " << c.zero_label();
  }
  // The larger of the two stretches: a stream never priced below the short compute's stretch.
  HardwareProfile both = streamed;
  both.measured.compute_stretch = 2.0;
  HardwareProfile short_only = before;
  short_only.measured.compute_stretch = 2.0;
  const PlanChoice dp = choice(1, 1, 4, 1, 1, Z::kAuto);
  EXPECT_DOUBLE_EQ(estimate(dp, both).step_s, estimate(dp, short_only).step_s);
  EXPECT_TRUE(streams_the_step(dp, 1, false, 2));
  EXPECT_FALSE(streams_the_step(dp, 3, true, 2));
  EXPECT_TRUE(streams_the_step(dp, 2, true, 1));
  EXPECT_FALSE(streams_the_step(dp, 2, true, 2));
}

// The per-meeting wait (step_terms.hpp, meeting_wait_s): with the profile's sync_wait_per_meeting and no wait per
// compute, every tp collective waits it once, in tensor_parallel, and nothing else moves. Counted by hand for tp2 dp2
// micro 2 at global batch 8 (2 micro-batches per step), 4 transformer blocks: 2 all-reduces in F and 2 in I each, the
// vocab-parallel embedding's 1 in F, the lm head's 1 in I and the loss's 2 in F, 20 per micro-batch; sequence
// parallelism: a block's 4 all-gathers / reduce-scatters in F, 4 in I and 2 all-gathers in W, the embedding's 2, the
// head's 3 and the loss's 2, 47 (each sample's collectives of one kind are posted together: one meeting); full
// recomputation reruns the blocks' F inside I, not the embedding's, head's or loss's (4 × 6 + 1 + 1 + 2). Without the
// measurement nothing changes.
TEST_F(StepBreakdownTest, EveryCollectiveWaitsThePerMeetingWait) {
  const HardwareProfile before = costly();
  HardwareProfile meet = before;
  meet.measured.sync_wait_per_meeting_s = 1e-4;
  PlanChoice tp{2, 1, 2, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  PlanChoice sp = tp, full = tp;
  sp.sequence_parallel = true;
  full.recompute = partition::Recompute::kFull;
  for (const auto& [choice, meetings] : {std::pair{tp, 2 * 20.0}, std::pair{sp, 2 * 47.0}, std::pair{full, 2 * 28.0}}) {
    const PlanEstimate a = estimate(choice, before), b = estimate(choice, meet);
    expect_sums(b);
    const double want = 1e-4 * meetings;
    EXPECT_NEAR(b.breakdown[T::kTensorParallel] - a.breakdown[T::kTensorParallel], want, 1e-9) << choice.layout();
    EXPECT_NEAR(b.step_s - a.step_s, want, 1e-9) << choice.layout();
    EXPECT_NEAR(b.breakdown[T::kForward], a.breakdown[T::kForward], 1e-12);
  }
  const PlanChoice dp{1, 1, 4, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};  // no meeting inside a pass
  EXPECT_DOUBLE_EQ(estimate(dp, meet).step_s, estimate(dp, before).step_s);
}

// The pipeline's transfers as two-rank meetings (step_terms.hpp, point_to_point_sync_wait): with one micro-batch on
// pp2 1f1b the step is one chain, F0 -> F1 -> B1 -> B0, and each transfer on it waits sync_wait_per_compute x the
// sending pass's compute: 0.5 x (stage 0's F + stage 1's B = I + W), by hand from the blocks' FLOPs at 1 GFLOP/s;
// it is point_to_point_wait, idle time, and nothing else moves. A profile without the measurement prices none.
TEST_F(StepBreakdownTest, PipelineTransfersWaitForTheSendersLostTime) {
  const PlanChoice c{1, 2, 1, 1, "1f1b", 8, 0, partition::Recompute::kNone, 8, false};
  HardwareProfile meet = costly();
  meet.measured.sync_wait_per_compute = 0.5;
  const PlanEstimate a = estimate(c, costly(), 2), b = estimate(c, meet, 2);
  expect_sums(b);
  EXPECT_EQ(a.breakdown[T::kPointToPointWait], 0.0);
  config::RunConfig rc = config::load_config(config_, c.overrides());
  rc.resolve(2);
  const run_plan::Plan plan = run_plan::make_plan(rc, 1, 0);
  const auto costs = partition::model_costs(plan.spec, DType::kF32);
  double f0 = 0, b1 = 0;
  for (int k = plan.partition.stages[0].begin; k < plan.partition.stages[0].end; ++k) {
    f0 += costs[static_cast<std::size_t>(k)].forward_flops;
  }
  for (int k = plan.partition.stages[1].begin; k < plan.partition.stages[1].end; ++k) {
    b1 += costs[static_cast<std::size_t>(k)].input_grad_flops + costs[static_cast<std::size_t>(k)].weight_grad_flops;
  }
  const double want = 0.5 * (f0 + b1) * 8 / 1e9;  // micro-batch 8
  ASSERT_GT(want, 0.0);
  EXPECT_NEAR(b.breakdown[T::kPointToPointWait], want, 1e-9 * want);
  EXPECT_NEAR(b.step_s - a.step_s, want, 1e-9 * a.step_s);
  for (const T t : {T::kForward, T::kInputGrad, T::kWeightGrad, T::kPointToPoint, T::kOptimizer}) {
    EXPECT_NEAR(b.breakdown[t], a.breakdown[t], 1e-12) << step_term_info(t).name;
  }
  const PlanChoice flat{1, 1, 2, 1, "1f1b", 4, 0, partition::Recompute::kNone, 8, false};  // no transfers
  EXPECT_DOUBLE_EQ(estimate(flat, meet, 2).step_s, estimate(flat, costly(), 2).step_s);
}

// SearchOptions::blocking_p2p (simulate --blocking-p2p, Megatron-LM of 2021): the pipeline's transfers hold their ranks
// at the code's own positions, so a pipelined plan is never faster and the compute terms do not move; the terms still
// sum to the step. A plan without a pipeline has no transfers: unchanged. Interleaved runs as Megatron's (pairs).
TEST_F(StepBreakdownTest, BlockingPointToPointSlowsOnlyPipelinedPlans) {
  SearchOptions async{4, 0}, blocking{4, 0};
  blocking.blocking_p2p = true;
  for (const auto& [schedule, v] : {std::pair<std::string, int>{"1f1b", 1}, {"interleaved_1f1b", 2}}) {
    PlanChoice c{1, 4, 1, v, schedule, 1, 0, partition::Recompute::kNone, 8, false};
    const PlanEstimate a = estimate_plan(config_, {}, c, costly(), async);
    const PlanEstimate b = estimate_plan(config_, {}, c, costly(), blocking);
    ASSERT_TRUE(a.valid && b.valid) << schedule << ": " << a.reason << b.reason;
    expect_sums(b);
    EXPECT_GT(b.step_s, a.step_s) << schedule;
    EXPECT_DOUBLE_EQ(b.breakdown[T::kForward], a.breakdown[T::kForward]) << schedule;
    EXPECT_GT(b.breakdown[T::kPointToPoint] + b.breakdown[T::kBubble],
              a.breakdown[T::kPointToPoint] + a.breakdown[T::kBubble]) << schedule;
  }
  PlanChoice flat{1, 1, 4, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate a = estimate_plan(config_, {}, flat, costly(), async);
  const PlanEstimate b = estimate_plan(config_, {}, flat, costly(), blocking);
  ASSERT_TRUE(a.valid && b.valid);
  EXPECT_DOUBLE_EQ(b.step_s, a.step_s);
}

// SearchOptions::optimizer_post_validation (simulate --optimizer-post-validation, the zero-bubble paper's run): the step
// is the longest per-rank span, not the makespan. 1F1B's first rank starts first and ends last: unchanged. ZB-H2's
// later ranks start later: shorter, by less than the last rank's start offset; the compute terms do not move and the
// terms still sum to the (shorter) step.
TEST_F(StepBreakdownTest, PostValidationPricesTheLongestSpan) {
  SearchOptions sync{4, 0}, post{4, 0};
  post.optimizer_post_validation = true;
  PlanChoice one{1, 4, 1, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate a = estimate_plan(config_, {}, one, costly(), sync);
  const PlanEstimate b = estimate_plan(config_, {}, one, costly(), post);
  ASSERT_TRUE(a.valid && b.valid) << a.reason << b.reason;
  expect_sums(b);
  EXPECT_NEAR(b.step_s, a.step_s, 1e-12 * a.step_s);
  PlanChoice h2{1, 4, 1, 1, "zb_h2", 1, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate c = estimate_plan(config_, {}, h2, costly(), sync);
  const PlanEstimate d = estimate_plan(config_, {}, h2, costly(), post);
  ASSERT_TRUE(c.valid && d.valid) << c.reason << d.reason;
  expect_sums(d);
  EXPECT_LT(d.step_s, c.step_s);
  EXPECT_GE(d.step_s, c.step_s - (c.breakdown[T::kPointToPoint] + c.breakdown[T::kBubble]));  // its busy time
  for (T t : {T::kForward, T::kInputGrad, T::kWeightGrad, T::kOptimizer}) {
    EXPECT_DOUBLE_EQ(d.breakdown[t], c.breakdown[t]) << step_term_info(t).name;
  }
  EXPECT_LT(d.breakdown[T::kPointToPoint] + d.breakdown[T::kBubble],
            c.breakdown[T::kPointToPoint] + c.breakdown[T::kBubble]);
}

TEST_F(StepBreakdownTest, TableHasARowPerTermAndTheTotal) {
  const PlanEstimate e = estimate(PlanChoice{2, 2, 1, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false});
  const auto lines = breakdown_table(e.breakdown, true);
  for (int t = 0; t < kNumStepTerms; ++t) {
    const std::string name(step_term_info(static_cast<StepTerm>(t)).name);
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind("  " + name + " ", 0) == 0; }))
        << name;
  }
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) { return l.find("    transformer_block") == 0; }));
  ASSERT_EQ(lines.back().rfind("  total", 0), 0u) << lines.back();
  const double total_ms = std::stod(lines.back().substr(26, 11));
  EXPECT_NEAR(total_ms, e.step_s * 1e3, 1e-3);
}

}  // namespace
}  // namespace cleave::planner::step_breakdown_test
