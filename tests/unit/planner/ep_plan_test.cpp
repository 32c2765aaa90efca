// The planner and the memory plan with expert parallelism (docs/planner.md, "Expert parallelism"): a rank's
// experts, gradients and optimizer state at ep 1, 2 and 4 counted by hand; the routed-row stash of an imbalanced
// rank; the four all-to-alls and the count exchange priced from a link's alpha-beta figures, by hand; ep searched only
// for moe models and only where it divides the experts and dp × cp; an ep layout chosen when the experts fit no other
// way; and a plan's --set lines selecting its cp and ep from a source config at other values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/step_terms.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "partition/ep_costs.hpp"
#include "partition/families/moe.hpp"
#include "partition/hardware_profile.hpp"
#include "support/scratch_dir_test.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::ep_plan_test {
namespace {

namespace fs = std::filesystem;

// A moe model whose experts dominate its parameters: D 32, F 64, E 8, k 2, two blocks.
constexpr const char* kMoe = R"({
  "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 16,
            "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2},
  "batch": {"global_batch_size": 8, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

constexpr std::int64_t kExpertParams = 3 * 32 * 64 * 8;  // per moe block

std::size_t at(MemoryCategory c) { return static_cast<std::size_t>(c); }

run_plan::MemoryPlan memory(int ep, double imbalance, int zero = 0) {
  config::RunConfig c = config::parse_config(kMoe, "<string>", {"parallel.expert_model_parallel_size=" + std::to_string(ep),
                                                               "optimizer.zero_stage=" + std::to_string(zero)});
  c.resolve(4);
  const run_plan::Plan plan =
      run_plan::make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
  return run_plan::estimate_rank_memory(plan, c, 0, imbalance);
}

TEST(EpPlan, ExpertMemoryPerRankAtEp124) {
  const run_plan::MemoryPlan one = memory(1, 1.0);
  ASSERT_GT(one.bytes[at(MemoryCategory::kParameters)], 2 * 4 * kExpertParams);  // every expert, f32
  for (const int ep : {2, 4}) {
    const run_plan::MemoryPlan m = memory(ep, 1.0);
    // Two blocks of E experts: the rank drops (ep - 1) / ep of them, in each of parameters, gradients and AdamW's
    // two moments (each gradient lives once, in the dp × cp bucket or the expert-dp one).
    const std::int64_t dropped = 2 * 4 * kExpertParams / ep * (ep - 1);
    EXPECT_EQ(one.bytes[at(MemoryCategory::kParameters)] - m.bytes[at(MemoryCategory::kParameters)], dropped) << ep;
    EXPECT_EQ(one.bytes[at(MemoryCategory::kGradients)] - m.bytes[at(MemoryCategory::kGradients)],
              dropped) << ep;
    EXPECT_EQ(one.bytes[at(MemoryCategory::kOptimizerState)] - m.bytes[at(MemoryCategory::kOptimizerState)],
              2 * dropped) << ep;
    // A balanced routing stashes what ep 1 does, plus the all-to-alls' buffers in the backward (one [T·k, D]).
    EXPECT_GE(m.bytes[at(MemoryCategory::kActivations)] - one.bytes[at(MemoryCategory::kActivations)], 0) << ep;
    EXPECT_LE(m.bytes[at(MemoryCategory::kActivations)] - one.bytes[at(MemoryCategory::kActivations)],
              16 * 2 * 32 * 4) << ep;
  }
  // The busiest rank of an imbalanced routing (1.5x the mean) stashes half of T·k rows more per moe block:
  // xp [., D] and g, u, h [., F] f32, per block in the forward stash (1F1B at pp 1: one micro-batch's).
  const run_plan::MemoryPlan hot = memory(2, 1.5);
  const run_plan::MemoryPlan even = memory(2, 1.0);
  const std::int64_t rows = 16 * 2 / 2;
  EXPECT_GE(hot.bytes[at(MemoryCategory::kActivations)] - even.bytes[at(MemoryCategory::kActivations)],
            2 * rows * (32 + 3 * 64) * 4);
  // The default is the dropless bound, not the time model's uniformly random routing: every block at min(k, E/ep)
  // · ep / k = 2 at ep 2 (each token's two rows on one rank), above the 1.5x of a measured routing.
  const run_plan::MemoryPlan bound = memory(2, 0);
  EXPECT_EQ(bound.bytes[at(MemoryCategory::kActivations)], memory(2, 2.0).bytes[at(MemoryCategory::kActivations)]);
  EXPECT_GT(bound.bytes[at(MemoryCategory::kActivations)], hot.bytes[at(MemoryCategory::kActivations)]);
}

// The memory plan's two ep figures (partition::EpMemoryImbalance), by hand on kMoe (T 16, k 2, D 32, F 64, two moe
// blocks, micro-batch 1, 1F1B on one stage): the peak is the last moe block's backward, holding both blocks' stashes
// (each xp [rows, D] and g, u, h [rows, F] f32: rows x 224 x 4 B) and its experts' phase (the received rows' d_o,
// dxp [rows, D] and dh, dg, du [rows, F]: rows x 256 x 4 B). So with S the stash figure and P the peak's, over
// the balanced plan: T·k x 4 x (2 (S - 1) 224 + (P - 1) 256) bytes. Before (one figure for both), {1.25, 1.75} could
// not be asked for, and the default (0) was the uniformly random routing's 1.065 at ep 2 (a real routing's peak
// went 4-14% over that plan, benchmarks/moe/RESULTS-2026-11-30-l-ep-memory.md).
TEST(EpPlan, StashesEveryBlockAtTheStashFigureAndPeaksOneBlockAtThePeakFigure) {
  const auto activations = [](int ep, partition::EpMemoryImbalance f) {
    config::RunConfig c = config::parse_config(kMoe, "<string>",
                                               {"parallel.expert_model_parallel_size=" + std::to_string(ep)});
    c.resolve(4);
    const run_plan::Plan plan =
        run_plan::make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
    return run_plan::estimate_rank_memory(plan, c, 0, f).bytes[at(MemoryCategory::kActivations)];
  };
  const std::int64_t rows_bytes = 16 * 2 * 4;  // T·k rows, per f32 column
  for (const int ep : {2, 4}) {
    const std::int64_t even = activations(ep, 1.0);
    // A measured routing: the ranks' stashed rows at most 1.25x (ep 2) / 1.5x (ep 4) their mean over the blocks,
    // the busiest block's busiest rank 1.75x / 3x.
    const double s = ep == 2 ? 1.25 : 1.5, p = ep == 2 ? 1.75 : 3.0;
    const std::int64_t measured = ep == 2 ? rows_bytes * (2 * 56 + 192)    // 0.25 x 224 twice, 0.75 x 256
                                          : rows_bytes * (2 * 112 + 512);  // 0.5 x 224 twice, 2 x 256
    EXPECT_EQ(activations(ep, {s, p}) - even, measured) << ep;
    EXPECT_EQ(measured, ep == 2 ? 38'912 : 94'208);
    // The default: the dropless bound for both, 2 at ep 2 and 4 at ep 4 (E 8, k 2).
    const std::int64_t bound = ep == 2 ? rows_bytes * (2 * 224 + 256) : rows_bytes * (2 * 3 * 224 + 3 * 256);
    EXPECT_EQ(activations(ep, {0.0, 0.0}) - even, bound) << ep;
    EXPECT_EQ(bound, ep == 2 ? 90'112 : 270'336);
    // Either field alone: the other at the bound.
    EXPECT_EQ(activations(ep, {s, 0.0}), activations(ep, {s, ep == 2 ? 2.0 : 4.0})) << ep;
  }
}

// The trainer's own plan takes the figures from the config (parallel.ep_stash_imbalance, ep_peak_imbalance): with
// the keys the plan is the hand numbers above (1.25 and 1.75 at ep 2: 38,912 bytes over the balanced plan, against
// the bound's 90,112), a figure given by the caller (the planner's flags) overrides its key, and a memory cap between
// the two plans refuses the run without the keys and passes it with them (memory_plan_violation, the check before
// the world starts).
TEST(EpPlan, TheConfigsFiguresSizeTheTrainersOwnPlan) {
  const auto plan_of = [](const std::vector<std::string>& keys) {
    std::vector<std::string> overrides = {"parallel.expert_model_parallel_size=2"};
    overrides.insert(overrides.end(), keys.begin(), keys.end());
    config::RunConfig c = config::parse_config(kMoe, "<string>", overrides);
    c.resolve(4);
    return std::pair{c, run_plan::make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0)};
  };
  const auto activations = [](const run_plan::MemoryPlan& m) { return m.bytes[at(MemoryCategory::kActivations)]; };
  const auto [bare, bare_plan] = plan_of({});
  const auto [keyed, keyed_plan] =
      plan_of({"parallel.ep_stash_imbalance=1.25", "parallel.ep_peak_imbalance=1.75"});
  const std::int64_t even = activations(run_plan::estimate_rank_memory(bare_plan, bare, 0, 1.0));
  EXPECT_EQ(activations(run_plan::estimate_rank_memory(keyed_plan, keyed, 0)) - even, 38'912);
  EXPECT_EQ(activations(run_plan::estimate_rank_memory(bare_plan, bare, 0)) - even, 90'112);
  // A caller's figure overrides its key; the other key still applies.
  EXPECT_EQ(activations(run_plan::estimate_rank_memory(keyed_plan, keyed, 0, {1.0, 1.0})), even);
  EXPECT_EQ(activations(run_plan::estimate_rank_memory(keyed_plan, keyed, 0, {0.0, 2.0})) - even,
            16 * 2 * 4 * (2 * 56 + 256));
  // The cap check: a limit half way between the two totals.
  const run_plan::CpuKernels cpu = run_plan::unresolved_cpu_kernels(bare);
  const std::int64_t low = run_plan::estimate_rank_memory(keyed_plan, keyed, 0, cpu).total();
  const std::int64_t high = run_plan::estimate_rank_memory(bare_plan, bare, 0, cpu).total();
  ASSERT_EQ(high - low, 90'112 - 38'912);
  config::RunConfig bare_capped = bare, keyed_capped = keyed;
  bare_capped.device.memory_limit = keyed_capped.device.memory_limit = (low + high) / 2;
  EXPECT_NE(run_plan::memory_plan_violation(bare_plan, bare_capped, cpu), "");
  EXPECT_EQ(run_plan::memory_plan_violation(keyed_plan, keyed_capped, cpu), "");
}

// ZeRO with ep at dp 4 (engine/train/data_parallel.hpp): the experts are sharded over the expert-dp group (dp / ep
// ranks), the rest over dp. A rank's share of each expert tensor, (E / ep) / (dp / ep) = E / dp, is what it was at ep
// 1: the sharded state and ZeRO-3's kept shards equal ep 1's up to the units' padding, while what ep removes is what a
// rank holds in full: ZeRO-2's parameters and gradients, ZeRO-3's gathered blocks (both moe blocks at once, the
// block and the prefetched next).
TEST(EpPlan, ExpertShardsPerRankUnderZeroTwoAndThree) {
  const std::int64_t padding = 4 * 4 * 64;  // bytes: a few units' 16-element and group-size padding
  for (const int ep : {2, 4}) {
    const std::int64_t others = 2 * 4 * kExpertParams / ep * (ep - 1);  // f32 bytes of other ranks' experts
    const run_plan::MemoryPlan z2 = memory(ep, 1.0, 2), one2 = memory(1, 1.0, 2);
    EXPECT_EQ(one2.bytes[at(MemoryCategory::kParameters)] - z2.bytes[at(MemoryCategory::kParameters)], others) << ep;
    EXPECT_EQ(z2.bytes[at(MemoryCategory::kOptimizerState)], one2.bytes[at(MemoryCategory::kOptimizerState)]) << ep;
    EXPECT_EQ(z2.gradients_between_steps, 0) << ep;
    // Within the step: the rank's gradients in full (its E / ep experts, also in the expert-dp bucket) plus a shard.
    EXPECT_LT(z2.bytes[at(MemoryCategory::kGradients)], one2.bytes[at(MemoryCategory::kGradients)]) << ep;
    const run_plan::MemoryPlan z3 = memory(ep, 1.0, 3), one3 = memory(1, 1.0, 3);
    EXPECT_NEAR(static_cast<double>(z3.bytes[at(MemoryCategory::kOptimizerState)]),
                static_cast<double>(one3.bytes[at(MemoryCategory::kOptimizerState)]), 2.0 * padding) << ep;
    // Parameters: the kept shards alike; gathered, both moe blocks hold E / ep experts instead of E.
    EXPECT_NEAR(static_cast<double>(one3.bytes[at(MemoryCategory::kParameters)] - z3.bytes[at(MemoryCategory::kParameters)]),
                static_cast<double>(others), padding) << ep;
    // Gradients: the unit buckets in full until reduced, the experts' E / ep of them.
    EXPECT_NEAR(static_cast<double>(one3.bytes[at(MemoryCategory::kGradients)] - z3.bytes[at(MemoryCategory::kGradients)]),
                static_cast<double>(others), 4.0 * kExpertParams / 2) << ep;
  }
}

class EpPlanSearch : public testing::ScratchDirTest {
 protected:
  EpPlanSearch() : ScratchDirTest("cleave_ep_plan_test_") {}

  // Compute and the optimizer cost (almost) nothing; the link has the given latency and bandwidth.
  static HardwareProfile profile(double latency_s = 1e-30, double bandwidth_Bps = 1e30) {
    const Link link{latency_s, bandwidth_Bps};
    return testing::synthetic_profile(1e30, 1e30, link, link, 8);
  }
};

TEST_F(EpPlanSearch, PricesTheFourAllToAllsFromTheLink) {
  const std::string config = write("moe.json", kMoe);
  const double latency = 1e-5, bandwidth = 1e8;
  PlanChoice c = choice_of_config(config, {}, 4);
  ASSERT_EQ(c.dp, 4);
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.25;
  const PlanEstimate one = estimate_plan(config, {}, c, profile(latency, bandwidth), options);
  ASSERT_TRUE(one.valid) << one.reason;
  EXPECT_EQ(one.ep_all_to_all_s, 0.0);
  EXPECT_DOUBLE_EQ(one.ep_imbalance, 1.0);
  for (const int ep : {2, 4}) {
    c.ep = ep;
    const PlanEstimate e = estimate_plan(config, {}, c, profile(latency, bandwidth), options);
    ASSERT_TRUE(e.valid) << e.reason;
    EXPECT_EQ(e.choice.layout(), "tp1 pp1 dp4 ep" + std::to_string(ep));
    EXPECT_DOUBLE_EQ(e.ep_imbalance, 1.25);
    // Busiest rank: 1.25 x (micro 1 x T 16 x k 2) rows of D 32 f32; an all-to-all priced as a ring reduce-scatter:
    // (ep-1)/ep x bytes / bandwidth + (ep-1) x latency; four per moe block and micro-batch.
    const double bytes = 1.25 * 16 * 2 * 32 * 4;
    const double one_all_to_all = (ep - 1.0) / ep * bytes / bandwidth + (ep - 1) * latency;
    EXPECT_NEAR(e.ep_all_to_all_s, 4 * one_all_to_all, 1e-12) << ep;
    // Both moe blocks' exchanges, in every micro-batch (2 per rank), land in the busiest rank's communication.
    EXPECT_GT(e.breakdown.tp_comm_s, 2 * 2 * 4 * one_all_to_all * 0.999) << ep;
    const auto keys = e.choice.overrides();
    EXPECT_NE(std::find(keys.begin(), keys.end(), "parallel.expert_model_parallel_size=" + std::to_string(ep)), keys.end());
  }
}

// The count exchange before each dispatch (step_terms.hpp, expert_count_exchange): E = 8 int64 per rank, ep - 1
// messages, (ep-1)/ep x 64 bytes / bandwidth + (ep-1) x latency on the link or on a measured point-to-point fit, or the
// profile's own timing of the exchange with the per-meeting wait, per moe block and micro-batch (2 blocks, 2
// micro-batches on the busiest rank), again in I's rerun under full recomputation; none at ep 1. As a meeting it
// takes, of each F's wait (sync_wait_per_compute x the pass's compute, by hand from the FLOPs at 1 GFLOP/s), the part
// for the compute before the dispatch (all but the expert GEMMs); the waits of the block in all stay what they were.
TEST_F(EpPlanSearch, PricesTheCountExchangeAsALatencyAndAMeeting) {
  const std::string config = write("moe.json", kMoe);
  const double latency = 1e-5, bandwidth = 1e8, rate = 1e9, gamma = 0.5;
  HardwareProfile old = profile(latency, bandwidth);  // a profile without the wait measured
  old.flops_f32 = old.flops_bf16 = rate;
  HardwareProfile meet = old;
  meet.measured.sync_wait_per_compute = gamma;
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.0;
  PlanChoice c = choice_of_config(config, {}, 4);
  const PlanEstimate dense = estimate_plan(config, {}, c, meet, options);
  ASSERT_TRUE(dense.valid) << dense.reason;
  EXPECT_EQ(dense.breakdown[StepTerm::kCountExchange], 0.0);
  c.ep = 2;
  const double exchange = 0.5 * 64 / bandwidth + latency;
  const PlanEstimate a = estimate_plan(config, {}, c, old, options);
  ASSERT_TRUE(a.valid) << a.reason;
  EXPECT_NEAR(a.breakdown[StepTerm::kCountExchange], 2 * 2 * exchange, 1e-15);
  PlanChoice full = c;
  full.recompute = partition::Recompute::kFull;
  EXPECT_NEAR(estimate_plan(config, {}, full, old, options).breakdown[StepTerm::kCountExchange], 2 * 2 * 2 * exchange,
              1e-15);
  HardwareProfile fitted = old;  // a measured point-to-point fit prices each message: (ep - 1)(alpha + 32 bytes / beta)
  fitted.measured.p2p = partition::AlphaBeta{2, 2.6e-5, 2e9};
  EXPECT_NEAR(estimate_plan(config, {}, c, fitted, options).breakdown[StepTerm::kCountExchange],
              2 * 2 * (2.6e-5 + 32 / 2e9), 1e-15);
  // The profile's own timing of the exchange replaces the fit (over 4 ranks: 3 messages a rank, 1 of them at ep 2),
  // and with a per-meeting wait each exchange waits it once. The all-to-alls, priced here on the point-to-point fit
  // (a ping-pong's latency, the peer's wake-up in it), wait none; on the link, 3 of the 4 of a block and micro-batch
  // do: the combine and both gradients (the dispatch follows the count exchange, whose meeting it shares).
  HardwareProfile timed = fitted;
  timed.measured.count_exchange_s = 6e-6, timed.measured.count_exchange_ranks = 4;
  const PlanEstimate t = estimate_plan(config, {}, c, timed, options);
  EXPECT_NEAR(t.breakdown[StepTerm::kCountExchange], 2 * 2 * 2e-6, 1e-15);
  timed.measured.sync_wait_per_meeting_s = 3e-5;
  const PlanEstimate w = estimate_plan(config, {}, c, timed, options);
  EXPECT_NEAR(w.breakdown[StepTerm::kCountExchange], 2 * 2 * (2e-6 + 3e-5), 1e-15);
  EXPECT_NEAR(w.breakdown[StepTerm::kExpertAllToAll], t.breakdown[StepTerm::kExpertAllToAll], 1e-15);
  HardwareProfile linked = old;
  const PlanEstimate l0 = estimate_plan(config, {}, c, linked, options);
  linked.measured.sync_wait_per_meeting_s = 3e-5;
  const PlanEstimate l1 = estimate_plan(config, {}, c, linked, options);
  EXPECT_NEAR(l1.breakdown[StepTerm::kExpertAllToAll] - l0.breakdown[StepTerm::kExpertAllToAll], 2 * 2 * 3 * 3e-5,
              1e-12);
  EXPECT_NEAR(l1.ep_exchange.meetings_s, 3 * 3e-5, 1e-15);

  const PlanEstimate b = estimate_plan(config, {}, c, meet, options);
  ASSERT_TRUE(b.valid) << b.reason;
  config::RunConfig resolved = config::parse_config(kMoe, "<string>", {});
  resolved.resolve(4);
  const run_plan::Plan plan = run_plan::make_plan(resolved, 2, 0);
  double before_dispatch = 0, passes = 0;  // FLOPs per sample, over the moe blocks
  const auto costs = partition::model_costs(plan.spec, DType::kF32);
  for (std::size_t k = 0; k < costs.size(); ++k) {
    if (plan.spec.blocks[k].n_experts == 0) continue;
    const auto& cost = costs[k];
    before_dispatch += cost.forward_flops - 3.0 * 2 * 16 * 2 * 32 * 64;  // less gate, up, down over T·k rows
    passes += cost.forward_flops + cost.input_grad_flops + cost.weight_grad_flops;
  }
  ASSERT_GT(before_dispatch, 0.0);
  const double wait = gamma * before_dispatch * 2 / rate;  // micro-batch 1, 2 micro-batches
  EXPECT_NEAR(b.breakdown[StepTerm::kCountExchange] - a.breakdown[StepTerm::kCountExchange], wait, 1e-9 * wait);
  const double all = gamma * passes * 2 / rate;  // 1f1b: every pass of a moe block ends at a meeting
  const double added = b.breakdown[StepTerm::kCountExchange] + b.breakdown[StepTerm::kExpertAllToAll] -
                       a.breakdown[StepTerm::kCountExchange] - a.breakdown[StepTerm::kExpertAllToAll];
  EXPECT_NEAR(added, all, 1e-9 * all);
  EXPECT_NEAR(b.step_s - a.step_s, all, 1e-9 * all);
}

// An all-to-all on a profile with a measured point-to-point fit (step_terms.hpp, ep_all_to_all_s): ep - 1 messages
// at the ping-pong's latency, the busiest rank's bytes at the slope of the profile's reduce-scatter fit over ep ranks
// (every rank sends and receives at once, as in that reduce-scatter; a ping-pong moves one way at a time),
// (ep - 1) alpha + bytes / beta_rs, by hand; the reduce-scatter fit's intercept (fitted from 4 KiB up) is no measure of
// these few-KiB messages. Without a reduce-scatter fit at ep ranks, the ping-pong's slope: (ep - 1)(alpha + bytes /
// ep / beta).
TEST_F(EpPlanSearch, PricesEachAllToAllAsOneMessagePerPeerOnTheMeasuredFit) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile fitted = profile(1e-5, 1e8);
  fitted.measured.p2p = partition::AlphaBeta{2, 1.5e-5, 6e9};
  fitted.measured.fits(partition::Collective::kReduceScatter).push_back(partition::AlphaBeta{2, 1e-7, 5e9});
  fitted.measured.fits(partition::Collective::kReduceScatter).push_back(partition::AlphaBeta{4, 1e-7, 2e9});
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.5;
  PlanChoice c = choice_of_config(config, {}, 4);
  const double bytes = 1.5 * 16 * 2 * 32 * 4;  // busiest rank: 1.5 x (micro 1 x T 16 x k 2) rows of D 32 f32
  for (const int ep : {2, 4}) {
    c.ep = ep;
    const PlanEstimate e = estimate_plan(config, {}, c, fitted, options);
    ASSERT_TRUE(e.valid) << e.reason;
    const double one = (ep - 1) * 1.5e-5 + bytes / (ep == 2 ? 5e9 : 2e9);
    EXPECT_NEAR(e.ep_all_to_all_s, 4 * one, 1e-15) << ep;
    EXPECT_NEAR(e.ep_exchange.all_to_all_s, 4 * one, 1e-15) << ep;
  }
  HardwareProfile two = fitted;  // a reduce-scatter fit at 2 ranks only: ep 4 on the ping-pong's slope
  two.measured.fits(partition::Collective::kReduceScatter).pop_back();
  c.ep = 4;
  const PlanEstimate e = estimate_plan(config, {}, c, two, options);
  ASSERT_TRUE(e.valid) << e.reason;
  EXPECT_NEAR(e.ep_all_to_all_s, 4 * 3 * (1.5e-5 + bytes / 4 / 6e9), 1e-15);
}

// Where the profile timed the exchange itself over ep ranks at the model's sizes (MeasuredCosts::ep_exchange,
// measure_ep_exchange), one all-to-all is that fit at the busiest rank's bytes, alpha_x + bytes / beta_x, by hand,
// in place of the point-to-point latency and the reduce-scatter slope; no meeting is added (the back-to-back call
// holds the peer's wake-up, as the ping-pong's latency did). At an ep the profile has no fit for, the rule before.
TEST_F(EpPlanSearch, PricesEachAllToAllFromTheProfilesTimedExchange) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile fitted = profile(1e-5, 1e8);
  fitted.measured.p2p = partition::AlphaBeta{2, 1.5e-5, 6e9};
  fitted.measured.fits(partition::Collective::kReduceScatter).push_back(partition::AlphaBeta{2, 1e-7, 5e9});
  fitted.measured.fits(partition::Collective::kReduceScatter).push_back(partition::AlphaBeta{4, 1e-7, 2e9});
  HardwareProfile timed = fitted;
  timed.measured.ep_exchange = {partition::AlphaBeta{2, 8e-5, 1.25e9}};
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.5;
  PlanChoice c = choice_of_config(config, {}, 4);
  c.ep = 2;
  const double bytes = 1.5 * 16 * 2 * 32 * 4;  // 6144: 1.5 x (micro 1 x T 16 x k 2) rows of D 32 f32
  const PlanEstimate before = estimate_plan(config, {}, c, fitted, options);
  const PlanEstimate e = estimate_plan(config, {}, c, timed, options);
  ASSERT_TRUE(e.valid && before.valid) << e.reason << before.reason;
  EXPECT_NEAR(e.ep_all_to_all_s, 4 * (8e-5 + bytes / 1.25e9), 1e-15);  // 4 x 84.9152 us = 339.6608 us
  EXPECT_NEAR(e.ep_all_to_all_s, 339.6608e-6, 1e-12);
  EXPECT_NEAR(e.ep_exchange.all_to_all_s, 339.6608e-6, 1e-12);
  EXPECT_EQ(e.ep_exchange.meetings_s, before.ep_exchange.meetings_s);
  EXPECT_EQ(e.ep_exchange.count_exchange_s, before.ep_exchange.count_exchange_s);
  EXPECT_GT(e.step_s, before.step_s);  // 84.9 us an all-to-all where the fits priced 16.2 us
  c.ep = 4;  // the fit is over 2 ranks: ep 4 keeps the point-to-point latency and the reduce-scatter slope
  const PlanEstimate four = estimate_plan(config, {}, c, timed, options);
  ASSERT_TRUE(four.valid) << four.reason;
  EXPECT_NEAR(four.ep_all_to_all_s, 4 * (3 * 1.5e-5 + bytes / 2e9), 1e-15);
}

// More ranks than cores (docs/planner.md, "More ranks than cores"): ep4 on 2 cores, every all-to-all and count exchange
// waits for its 3 peers' core holders, each not running half the time, for half the mean action between meetings:
// the stage's compute per micro-batch on a whole core (priced at 2x, the cores' share) over its 10 meetings (2 moe
// blocks: count exchange, dispatch, combine in F; both gradients in I). The same plan with a device per rank (no core
// count) prices the exchanges without it and the rest at 1x; ep2 on the same 2 cores (one rank per core) prices every
// term as with a device per rank, bit for bit.
TEST_F(EpPlanSearch, OversubscribedEpMeetingsWaitForThePeersCoreHolders) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile shared = profile(1e-5, 1e8);
  shared.device_type = DeviceType::kCpu;
  shared.flops_f32 = shared.flops_bf16 = 1e9;
  shared.cores_per_node = 2;
  shared.measured_ranks_per_node = 2;
  HardwareProfile devices = shared;
  devices.cores_per_node = 0;
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.5;
  PlanChoice c = choice_of_config(config, {}, 4);
  c.ep = 4;
  const PlanEstimate e = estimate_plan(config, {}, c, shared, options);
  const PlanEstimate own = estimate_plan(config, {}, c, devices, options);
  ASSERT_TRUE(e.valid && own.valid) << e.reason << own.reason;
  ASSERT_TRUE(e.oversubscribed());
  ASSERT_DOUBLE_EQ(e.core_sharing, 2.0);
  using T = StepTerm;
  const double micro_batches = 2;  // global 8 over dp 4, micro 1
  const double compute = e.breakdown[T::kForward] + e.breakdown[T::kInputGrad] + e.breakdown[T::kWeightGrad] +
                         e.breakdown[T::kElementwise] + e.breakdown[T::kKernelLaunch];
  ASSERT_GT(compute, 0);
  const double action = compute / micro_batches / 2.0 / 10;
  const double each = 3 * (1 - 1.0 / 2) * action / 2;
  EXPECT_NEAR(e.ep_core_holder_wait_s, each, 1e-15);
  EXPECT_NEAR(e.breakdown[T::kExpertAllToAll] - own.breakdown[T::kExpertAllToAll], micro_batches * 2 * 4 * each,
              1e-12);
  EXPECT_NEAR(e.breakdown[T::kCountExchange] - own.breakdown[T::kCountExchange], micro_batches * 2 * each, 1e-12);
  EXPECT_NEAR(e.ep_exchange.meetings_s - own.ep_exchange.meetings_s, 4 * each, 1e-15);
  EXPECT_NEAR(e.ep_exchange.count_exchange_s - own.ep_exchange.count_exchange_s, each, 1e-15);
  EXPECT_EQ(own.ep_core_holder_wait_s, 0.0);
  EXPECT_NE(oversubscription_warning(e).find("each ep all-to-all and count exchange waits"), std::string::npos)
      << oversubscription_warning(e);
  // One rank per core: nothing waits, and every term is the device-per-rank plan's.
  c = choice_of_config(config, {}, 2);
  c.ep = 2;
  const PlanEstimate two = estimate_plan(config, {}, c, shared, SearchOptions{2, 0});
  const PlanEstimate two_own = estimate_plan(config, {}, c, devices, SearchOptions{2, 0});
  ASSERT_TRUE(two.valid && two_own.valid) << two.reason << two_own.reason;
  EXPECT_FALSE(two.oversubscribed());
  EXPECT_EQ(two.ep_core_holder_wait_s, 0.0);
  EXPECT_EQ(two.step_s, two_own.step_s);
  for (std::size_t t = 0; t < two.breakdown.seconds.size(); ++t) {
    EXPECT_EQ(two.breakdown.seconds[t], two_own.breakdown.seconds[t]) << t;
  }
}

// The split simulate --json reports (EpExchangePrice) against the router log's measured split, by hand on a link
// profile at 1 GFLOP/s without a wait measured: own = the four all-to-alls + the count exchange (no meetings priced);
// the imbalance wait = the busiest rank's extra expert GEMMs, (f - 1) x 3 GEMMs x 2·T·k·D·F FLOPs per pass, in F, I
// and W; no peer wait. At f = 1 no imbalance wait; at ep 1 all zero.
TEST_F(EpPlanSearch, SplitsOneBlocksExchangesIntoTheirOwnTimeAndTheWaits) {
  const std::string config = write("moe.json", kMoe);
  const double latency = 1e-5, bandwidth = 1e8, rate = 1e9;
  HardwareProfile p = profile(latency, bandwidth);
  p.flops_f32 = p.flops_bf16 = rate;
  SearchOptions options{4, 0};
  PlanChoice c = choice_of_config(config, {}, 4);
  options.ep_imbalance = 1.0;
  EXPECT_EQ(estimate_plan(config, {}, c, p, options).ep_exchange.own_s(), 0.0);
  c.ep = 2;
  for (const double f : {1.0, 1.5}) {
    options.ep_imbalance = f;
    const PlanEstimate e = estimate_plan(config, {}, c, p, options);
    ASSERT_TRUE(e.valid) << e.reason;
    const double one = 0.5 * f * 16 * 2 * 32 * 4 / bandwidth + latency;
    const double counts = 0.5 * 64 / bandwidth + latency;
    EXPECT_NEAR(e.ep_exchange.all_to_all_s, 4 * one, 1e-15) << f;
    EXPECT_EQ(e.ep_exchange.meetings_s, 0.0) << f;
    EXPECT_NEAR(e.ep_exchange.count_exchange_s, counts, 1e-15) << f;
    EXPECT_NEAR(e.ep_exchange.own_s(), 4 * one + counts, 1e-15) << f;
    EXPECT_EQ(e.ep_exchange.peer_wait_s, 0.0) << f;
    const double expert_flops = 3.0 * 2 * 16 * 2 * 32 * 64;  // gate, up, down over T·k rows, micro-batch 1
    EXPECT_NEAR(e.ep_exchange.imbalance_wait_s, (f - 1) * 3 * expert_flops / rate, 1e-12) << f;
  }
}

// The profile's measured routed-expert fit (partition::MeasuredExpertRows, `expert_rows`) is recorded but not priced
// yet (docs/planner.md, Expert parallelism; RESULTS-2026-11-30-c): with it the busiest rank's extra compute is still
// (f - 1) x the expert GEMMs' FLOP share, by hand, and every term of the plan (the count exchange's wait included) is
// the one without the fit, at f 1, 1.5 and 2 and with sync_wait_per_compute measured.
TEST_F(EpPlanSearch, RecordsTheMeasuredExpertRowsButPricesTheImbalanceByTheFlopShare) {
  const std::string config = write("moe.json", kMoe);
  const double rate = 1e9;
  HardwareProfile bare = profile(1e-5, 1e8);
  bare.flops_f32 = bare.flops_bf16 = rate;
  bare.measured.sync_wait_per_compute = 0.5;
  config::RunConfig resolved = config::parse_config(kMoe, "<string>", {});
  resolved.resolve(4);
  const run_plan::Plan plan = run_plan::make_plan(resolved, 2, 0);
  const partition::BlockSpec& block = plan.spec.blocks[1];
  ASSERT_GT(block.n_experts, 0);
  partition::MeasuredExpertRows rows;
  rows.shape = partition::block_shape_key(block);
  rows.tp = 1;
  rows.rows = {32, 64, 128};
  rows.intercept = {1e-5, 2e-5, 3e-5};
  rows.per_row = {4e-8, 7e-8, 5e-8};
  HardwareProfile fit = bare;
  fit.measured.expert_rows.push_back(rows);
  ASSERT_NE(fit.measured.expert_rows_of(rows.shape, 1), nullptr);
  SearchOptions options{4, 0};
  PlanChoice c = choice_of_config(config, {}, 4);
  c.ep = 2;
  const double expert_flops = 3.0 * 2 * 16 * 2 * 32 * 64;  // 3 GEMMs x 2 T k D F, per pass and micro-batch
  for (const double f : {1.0, 1.5, 2.0}) {
    options.ep_imbalance = f;
    const PlanEstimate a = estimate_plan(config, {}, c, bare, options), b = estimate_plan(config, {}, c, fit, options);
    ASSERT_TRUE(a.valid && b.valid) << a.reason << b.reason;
    EXPECT_NEAR(b.ep_exchange.imbalance_wait_s, (f - 1) * 3 * expert_flops / rate, 1e-12) << f;
    for (int t = 0; t < kNumStepTerms; ++t) {
      const auto term = static_cast<StepTerm>(t);
      EXPECT_EQ(a.breakdown[term], b.breakdown[term]) << step_term_info(term).name << " at f " << f;
    }
  }
}

// Routing on the host on a GPU (step_terms.hpp, host_wait_s): each host wait of a moe block costs 3.8 us + the
// profile's kernel_launch_us (1.3 us on the H100 profile), in the kernel_launch term. By hand, per moe block and
// micro-batch (2 blocks, 2 micro-batches on the rank): ep 1, F 1 + I 2; ep 2, F 3 + I 2; under full recomputation
// the rerun F's again. The same plan on the profile marked a CPU's prices none, and nothing else moves. A sigmoid
// router whose bias moves (bias_update_rate > 0) adds 2 waits per routed layer to the optimizer step; a rate of 0 none.
TEST_F(EpPlanSearch, PricesRoutingsHostWaitsOnGpuPlansOnly) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile h100 = partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
  ASSERT_EQ(h100.device_type, DeviceType::kCuda);
  ASSERT_FALSE(h100.measured.has_blocks());
  HardwareProfile cpu = h100;
  cpu.device_type = DeviceType::kCpu;
  const double each = 3.8e-6 + 1.3e-6;
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.0;
  const auto waits = [&](const PlanChoice& c, const std::string& path) {
    const PlanEstimate g = estimate_plan(path, {}, c, h100, options), k = estimate_plan(path, {}, c, cpu, options);
    EXPECT_TRUE(g.valid && k.valid) << g.reason << k.reason;
    for (int t = 0; t < kNumStepTerms; ++t) {
      const auto term = static_cast<StepTerm>(t);
      if (term == StepTerm::kKernelLaunch || term == StepTerm::kOptimizer || term == StepTerm::kBubble) continue;
      EXPECT_NEAR(g.breakdown[term], k.breakdown[term], 1e-15) << step_term_info(term).name;
    }
    return std::pair{g.breakdown[StepTerm::kKernelLaunch] - k.breakdown[StepTerm::kKernelLaunch],
                     g.breakdown[StepTerm::kOptimizer] - k.breakdown[StepTerm::kOptimizer]};
  };
  PlanChoice c = choice_of_config(config, {}, 4);
  EXPECT_NEAR(waits(c, config).first, 2 * 2 * (1 + 2) * each, 1e-15);
  EXPECT_NEAR(waits(c, config).second, 0.0, 1e-18);
  c.ep = 2;
  EXPECT_NEAR(waits(c, config).first, 2 * 2 * (3 + 2) * each, 1e-15);
  c.recompute = partition::Recompute::kFull;
  EXPECT_NEAR(waits(c, config).first, 2 * 2 * (3 + 2 + 3) * each, 1e-15);

  std::string sigmoid = kMoe;
  const std::string top_k = "\"top_k\": 2";
  sigmoid.replace(sigmoid.find(top_k), top_k.size(), top_k + ", \"router\": \"sigmoid\", \"bias_update_rate\": 0.001");
  const std::string moving = write("sigmoid.json", sigmoid);
  PlanChoice s = choice_of_config(moving, {}, 4);
  const auto [launch, update] = waits(s, moving);
  EXPECT_NEAR(launch, 2 * 2 * (1 + 1 + 2) * each, 1e-15);  // F: the logits and the bias read back
  EXPECT_NEAR(update, 2 * 2 * each, 1e-15);                 // 2 routed layers, 2 waits each, once per step
  sigmoid.replace(sigmoid.find("0.001"), 5, "0");
  const std::string fixed = write("fixed.json", sigmoid);
  EXPECT_NEAR(waits(choice_of_config(fixed, {}, 4), fixed).second, 0.0, 1e-18);
}

// The host's routing (step_terms_host_waits.cpp, moe_host_routing) on a roofline profile with a measured fit: per moe
// block and micro-batch, F = a_F + b_F · tokens, I = a_I + b_I · tokens (the rank's b · T / cp tokens), a full
// rerun F's again, in kernel_launch and nothing else; linear in the tokens, scaled by E over the fit's E, and zero
// without the fit or on a profile whose block tables hold it. By hand: 2 moe blocks, T 16, 8 samples over dp 4.
TEST_F(EpPlanSearch, PricesTheHostsRoutingFromTheProfilesFit) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile bare = partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
  bare.measured.host_routing.clear();
  HardwareProfile fitted = bare;
  const double af = 2e-6, bf = 50e-9, ai = 3e-6, bi = 120e-9;
  fitted.measured.host_routing = {{8, 2, {16, 32, 64}, {af, ai, 0.0}, {bf, bi, 0.0}}};
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.0;
  const auto routing = [&](const PlanChoice& c, const HardwareProfile& with) {
    const PlanEstimate g = estimate_plan(config, {}, c, with, options), k = estimate_plan(config, {}, c, bare, options);
    EXPECT_TRUE(g.valid && k.valid) << g.reason << k.reason;
    for (int t = 0; t < kNumStepTerms; ++t) {
      const auto term = static_cast<StepTerm>(t);
      if (term == StepTerm::kKernelLaunch || term == StepTerm::kBubble) continue;
      EXPECT_NEAR(g.breakdown[term], k.breakdown[term], 1e-15) << step_term_info(term).name;
    }
    return g.breakdown[StepTerm::kKernelLaunch] - k.breakdown[StepTerm::kKernelLaunch];
  };
  const auto pass = [](double a, double b, double tokens) { return a + b * tokens; };
  PlanChoice c = choice_of_config(config, {}, 4);
  ASSERT_EQ(c.dp, 4);
  ASSERT_EQ(c.micro_batch, 1);
  const double one = pass(af, bf, 16) + pass(ai, bi, 16);
  EXPECT_NEAR(routing(c, fitted), 2 * 2 * one, 1e-15);  // 2 blocks x 2 micro-batches
  c.micro_batch = 2;                                     // one micro-batch of 32 tokens
  EXPECT_NEAR(routing(c, fitted), 2 * 1 * (pass(af, bf, 32) + pass(ai, bi, 32)), 1e-15);
  c.micro_batch = 1;
  c.ep = 2;  // ep moves rows, not the routing: the same
  EXPECT_NEAR(routing(c, fitted), 2 * 2 * one, 1e-15);
  c.ep = 1;
  c.recompute = partition::Recompute::kFull;  // the rerun routes again
  EXPECT_NEAR(routing(c, fitted), 2 * 2 * (one + pass(af, bf, 16)), 1e-15);
  c.recompute = partition::Recompute::kNone;
  HardwareProfile narrow = fitted;  // a fit at E 4: its per-token cost x 8 / 4
  narrow.measured.host_routing.front().experts = 4;
  EXPECT_NEAR(routing(c, narrow), 2 * 2 * (pass(af, 2 * bf, 16) + pass(ai, 2 * bi, 16)), 1e-15);
  EXPECT_NEAR(routing(c, bare), 0.0, 1e-18);
  // Under cp the rank routes its T / cp tokens; a profile whose block tables timed the real layer holds the routing
  // already (nothing added); a block without experts routes nothing.
  config::RunConfig resolved = config::parse_config(kMoe, "<string>", {"parallel.context_parallel_size=2"});
  resolved.resolve(4);
  const run_plan::Plan plan =
      run_plan::make_plan(resolved, static_cast<int>(resolved.resolved_batch().gradient_accumulation_steps), 0);
  const PlanChoice cp = choice_of_config(config, {"parallel.context_parallel_size=2"}, 4);
  ASSERT_EQ(cp.cp, 2);
  ASSERT_GT(plan.spec.blocks[1].n_experts, 0);
  const MoeHostRouting half = moe_host_routing(make_term_context(plan, resolved, cp, fitted, options, 1.0), 1);
  EXPECT_NEAR(half.forward_s, pass(af, bf, 8), 1e-18);
  EXPECT_NEAR(half.input_grad_s, pass(ai, bi, 8), 1e-18);
  EXPECT_EQ(half.rerun_s, 0.0);
  EXPECT_EQ(moe_host_routing(make_term_context(plan, resolved, cp, fitted, options, 1.0), 0).forward_s, 0.0);
  HardwareProfile measured = fitted;
  measured.measured.blocks.push_back({"any", 1, 1, 1e-3, 1e-3, 1e-3});
  EXPECT_EQ(moe_host_routing(make_term_context(plan, resolved, cp, measured, options, 1.0), 1).forward_s, 0.0);
}

// More ranks than cores (4 on 2, rho 2, the profile's time sharing measured): each all-to-all and count exchange of
// 4 ranks waits collective_handoffs = 1 + (4 - 2)(1 - 1/2) = 2 handoffs of the yielding kind (25 us), not the
// spinning one (500 us) the other collectives take; by hand per moe block and micro-batch: 4 all-to-alls x 2 and
// the count exchange's 2.
TEST_F(EpPlanSearch, OversubscribedExchangesWaitYieldingHandoffs) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile p = profile(2e-5, 2e9);
  p.device_type = DeviceType::kCpu;
  p.cores_per_node = 2;
  p.measured_ranks_per_node = 2;
  p.measured.ranks = 2;
  SearchOptions options{4, 0};
  options.ep_imbalance = 1.0;
  PlanChoice c = choice_of_config(config, {}, 4);
  c.ep = 4;
  const PlanEstimate before = estimate_plan(config, {}, c, p, options);
  ASSERT_TRUE(before.valid) << before.reason;
  // Without the key only the wait for the peers' core holders (OversubscribedEpMeetingsWaitForThePeersCoreHolders),
  // on compute that costs (almost) nothing here.
  EXPECT_NEAR(before.ep_exchange.meetings_s, 0.0, 1e-15);
  p.measured.time_sharing = partition::MeasuredCosts::TimeSharing{2, 2.0, 25e-6, 500e-6, "recorded"};
  const PlanEstimate shared = estimate_plan(config, {}, c, p, options);
  ASSERT_TRUE(shared.valid) << shared.reason;
  EXPECT_NEAR(shared.ep_exchange.meetings_s, 4 * 2 * 25e-6, 1e-15);
  EXPECT_NEAR(shared.ep_exchange.count_exchange_s - before.ep_exchange.count_exchange_s, 2 * 25e-6, 1e-15);
  EXPECT_NEAR(shared.ep_exchange.all_to_all_s, before.ep_exchange.all_to_all_s, 1e-18);
}

// Gradient reduction with ep (step_terms.hpp, expert_gradient_reduction): the non-expert gradients over the dp 4
// replicas, each rank's E / ep experts over its expert-dp group of dp / ep ranks, priced by hand from the link's
// ring formulas; at ep 4 the expert-dp group is one rank and the experts reduce nothing. Pricing the experts over
// dp x cp (the planner's former rule) would cost more.
TEST_F(EpPlanSearch, PricesExpertGradientsOverTheExpertDpGroup) {
  const std::string config = write("moe.json", kMoe);
  const double latency = 1e-5, bandwidth = 1e8;
  const Link link{latency, bandwidth};
  config::RunConfig resolved = config::parse_config(kMoe, "<string>", {});
  resolved.resolve(4);
  const run_plan::Plan plan =
      run_plan::make_plan(resolved, static_cast<int>(resolved.resolved_batch().gradient_accumulation_steps), 0);
  std::int64_t total = 0;
  for (const auto& cost : partition::model_costs(plan.spec, DType::kF32)) total += cost.param_count;
  const double dense = 4.0 * static_cast<double>(total - 2 * kExpertParams);  // f32 bytes
  for (const int zero : {0, 2}) {
    for (const int ep : {2, 4}) {
      PlanChoice c = choice_of_config(config, {}, 4);
      c.ep = ep;
      c.zero_stage = zero;
      c.zero_reduce = zero >= 2 ? config::ZeroReduce::kPerStep : config::ZeroReduce::kAuto;
      const PlanEstimate e = estimate_plan(config, {}, c, profile(latency, bandwidth), SearchOptions{4, 0});
      ASSERT_TRUE(e.valid) << e.reason;
      const double experts = 4.0 * 2 * kExpertParams / ep;  // this rank's, f32 bytes
      const int expert_dp = 4 / ep;
      // ZeRO 0 all-reduces; ZeRO-2 reduce-scatters (half a ring all-reduce) and all-gathers the updated values.
      const double f = zero == 0 ? 1.0 : 0.5;
      const double want = f * (link.all_reduce_s(dense, 4) + link.all_reduce_s(experts, expert_dp));
      EXPECT_NEAR(e.breakdown[StepTerm::kDataParallel], want, 1e-9 * want) << "zero " << zero << " ep " << ep;
      const double over_dp = f * (link.all_reduce_s(dense, 4) + link.all_reduce_s(experts, 4));
      EXPECT_LT(e.breakdown[StepTerm::kDataParallel], over_dp) << "zero " << zero << " ep " << ep;
      if (zero == 2) {
        const double gather = 0.5 * (link.all_reduce_s(dense, 4) + link.all_reduce_s(experts, expert_dp));
        EXPECT_NEAR(e.breakdown[StepTerm::kZeroGather], gather, 1e-9 * gather) << "ep " << ep;
      }
    }
  }
}

// On a roofline profile (the shipped H100's curve) the busiest ep rank's expert compute is its E GEMMs per projection
// at imbalance × the mean rows, priced launch by launch (partition::moe_routed_expert_work), and the SwiGLU's traffic
// over its rows: from imbalance 1 to 1.5 the F, I and W terms grow by exactly that, per moe block (2) and micro-batch
// (2 per rank at dp 4), GEMMs in the compute terms and the traffic in the elementwise one; the launches do not move.
// (With the wave term, as shipped, GEMMs of a few rows take one wave of one tile whatever their rows: no change.)
TEST_F(EpPlanSearch, RooflineImbalancePricesTheBusiestRanksExpertGemmsLaunchByLaunch) {
  const std::string config = write("moe.json", kMoe);
  HardwareProfile h100 = partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
  ASSERT_TRUE(h100.has_roofline() && !h100.measured.has_blocks());
  // Without the wave term: this model's expert GEMMs (4 and 6 rows) are one wave of one tile each either way, which
  // prices them alike; the efficiency curve alone moves with their rows.
  h100.sm_count = 0;
  h100.gemm_tiles.clear();
  PlanChoice c = choice_of_config(config, {}, 4);
  c.ep = 2;
  SearchOptions even{4, 0}, hot{4, 0};
  even.ep_imbalance = 1.0;
  hot.ep_imbalance = 1.5;
  const PlanEstimate a = estimate_plan(config, {}, c, h100, even), b = estimate_plan(config, {}, c, h100, hot);
  ASSERT_TRUE(a.valid && b.valid) << a.reason << b.reason;
  config::RunConfig resolved = config::parse_config(kMoe, "<string>", {});
  resolved.resolve(4);
  const run_plan::Plan plan =
      run_plan::make_plan(resolved, static_cast<int>(resolved.resolved_batch().gradient_accumulation_steps), 0);
  const partition::BlockSpec& block = plan.spec.blocks[1];
  ASSERT_GT(block.n_experts, 0);
  const partition::BlockWork mean = partition::moe_routed_expert_work(block, DType::kF32, 1, 1, 1.0);
  const partition::BlockWork busy = partition::moe_routed_expert_work(block, DType::kF32, 1, 1, 1.5);
  const double per_step = 2.0 * 2.0;  // moe blocks x micro-batches on the rank
  const auto gemms = [&](const partition::PassWork& hi, const partition::PassWork& lo) {
    return per_step * (h100.gemm_pass_seconds(hi, false) - h100.gemm_pass_seconds(lo, false));
  };
  const auto stream = [&](const partition::PassWork& hi, const partition::PassWork& lo) {
    return per_step * (h100.elementwise_seconds(hi) - h100.elementwise_seconds(lo));
  };
  const double df = gemms(busy.forward, mean.forward), di = gemms(busy.input_grad, mean.input_grad),
               dw = gemms(busy.weight_grad, mean.weight_grad);
  ASSERT_GT(df, 0.0);
  EXPECT_NEAR(b.breakdown[StepTerm::kForward] - a.breakdown[StepTerm::kForward], df, 1e-9 * df);
  EXPECT_NEAR(b.breakdown[StepTerm::kInputGrad] - a.breakdown[StepTerm::kInputGrad], di, 1e-9 * di);
  EXPECT_NEAR(b.breakdown[StepTerm::kWeightGrad] - a.breakdown[StepTerm::kWeightGrad], dw, 1e-9 * dw);
  const double de = stream(busy.forward, mean.forward) + stream(busy.input_grad, mean.input_grad) +
                    stream(busy.weight_grad, mean.weight_grad);
  EXPECT_NEAR(b.breakdown[StepTerm::kElementwise] - a.breakdown[StepTerm::kElementwise], de, 1e-9 * de);
  EXPECT_DOUBLE_EQ(b.breakdown[StepTerm::kKernelLaunch], a.breakdown[StepTerm::kKernelLaunch]);
}

// Under cp a rank routes its T/cp tokens: on a roofline profile its experts' GEMMs are priced at b · T/cp · k / E rows
// each (E launches per projection on every cp rank), in place of the block's T-row price ÷ cp but its launches, which
// stay whole (block_compute's).
TEST_F(EpPlanSearch, RooflineExpertRowsUnderContextParallelismAreTheRanksOwn) {
  const std::string path = write("moe.json", kMoe);
  HardwareProfile h100 = partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
  h100.sm_count = 0;  // the curve alone (see above)
  h100.gemm_tiles.clear();
  config::RunConfig resolved = config::parse_config(kMoe, "<string>", {"parallel.context_parallel_size=2"});
  resolved.resolve(4);
  const run_plan::Plan plan =
      run_plan::make_plan(resolved, static_cast<int>(resolved.resolved_batch().gradient_accumulation_steps), 0);
  PlanChoice choice = choice_of_config(path, {"parallel.context_parallel_size=2"}, 4);
  ASSERT_EQ(choice.cp, 2);
  const SearchOptions options{4, 0};
  const TermContext c = make_term_context(plan, resolved, choice, h100, options, 1.0);
  const int b = 1;
  const partition::BlockSpec& block = plan.spec.blocks[b];
  ASSERT_GT(block.n_experts, 0);
  const BlockCompute even = block_compute(c, b, 0.0);
  const BlockCompute x = expert_imbalance_compute(c, b, even);
  partition::BlockSpec half = block;
  half.seq_len = block.seq_len / 2;
  const partition::BlockWork whole = partition::moe_routed_expert_work(block, DType::kF32, 1, 1);
  const partition::BlockWork own = partition::moe_routed_expert_work(half, DType::kF32, 1, 1);
  const auto want = [&](const partition::PassWork& mine, const partition::PassWork& priced) {
    const double launch = h100.launch_seconds(priced);
    return h100.roofline_seconds(mine, false) - ((h100.roofline_seconds(priced, false) - launch) / 2 + launch);
  };
  EXPECT_NEAR(x.forward_s - even.forward_s, want(own.forward, whole.forward), 1e-15);
  EXPECT_NEAR(x.input_grad_s - even.input_grad_s, want(own.input_grad, whole.input_grad), 1e-15);
  EXPECT_NEAR(x.weight_grad_s - even.weight_grad_s, want(own.weight_grad, whole.weight_grad), 1e-15);
  // A cp rank launches all its GEMMs, 3 per expert in each pass, as block_compute already priced them (not half).
  EXPECT_GE(even.launch.forward_s, h100.kernel_launch_s * (3 * 8 + 1));
  EXPECT_NEAR(x.launch.forward_s, even.launch.forward_s, 1e-15);
  EXPECT_GE(x.forward_s, even.forward_s);  // every expert's weights read on each cp rank: never below T's price ÷ cp
}

TEST_F(EpPlanSearch, SearchesEpOnlyForMoeModelsWhereItDivides) {
  const SearchResult r = search_plans(write("moe.json", kMoe), {}, profile(), SearchOptions{4, 0});
  std::set<int> eps, zeros_with_ep;
  for (const auto& e : r.ranked) {
    eps.insert(e.choice.ep);
    EXPECT_EQ((e.choice.dp * e.choice.cp) % e.choice.ep, 0) << e.choice.layout();
    if (e.choice.ep > 1) zeros_with_ep.insert(e.choice.zero_stage);
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));
  EXPECT_EQ(zeros_with_ep, (std::set<int>{0, 1, 2, 3}));  // every ZeRO stage composes with ep
  const std::string dense = write("gpt.json", R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 32,
    "n_layers": 2, "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
    "data": {"type": "synthetic"}})");
  for (const auto& e : search_plans(dense, {}, profile(), SearchOptions{4, 0}).ranked) EXPECT_EQ(e.choice.ep, 1);
}

// ep × tp (expert tensor parallelism) is searched like any other layout: on 4 ranks tp 2 leaves dp 2, which holds
// ep 2; its plan holds less than tp 2 at ep 1 (E / ep experts, each ÷ tp) and no more than ep 2 at tp 1 holds.
TEST_F(EpPlanSearch, SearchesEpTimesTensorParallel) {
  const SearchResult r = search_plans(write("moe.json", kMoe), {}, profile(), SearchOptions{4, 0});
  std::int64_t ep_tp = -1, tp_only = -1;
  for (const auto& e : r.ranked) {
    if (e.choice.pp != 1 || e.choice.zero_stage != 0 || e.choice.sequence_parallel || e.choice.cp != 1) continue;
    if (e.choice.tp == 2 && e.choice.ep == 2) ep_tp = ep_tp < 0 ? e.peak_bytes : std::min(ep_tp, e.peak_bytes);
    if (e.choice.tp == 2 && e.choice.ep == 1) tp_only = tp_only < 0 ? e.peak_bytes : std::min(tp_only, e.peak_bytes);
  }
  for (const auto& e : r.rejected) {
    EXPECT_FALSE(e.choice.tp > 1 && e.choice.ep > 1 && e.reason.find("tensor_model_parallel") != std::string::npos)
        << e.choice.layout() << ": " << e.reason;
  }
  ASSERT_GT(ep_tp, 0) << "no tp2 ep2 plan ranked";
  ASSERT_GT(tp_only, 0);
  EXPECT_LT(ep_tp, tp_only);
}

// A plan's --set lines (what --write, --trial, --json and cleave run's re-plan hand on) select exactly the layout
// the search estimated (apply_to), also from a source config at cp 2 and ep 2: a plan at cp 1 or ep 1 must set them
// back to 1 (they were written only above 1, so the source's cp 2 / ep 2 stayed and the plan was refused or ran on
// another world). The source's ep memory figures (parallel.ep_stash_imbalance, ep_peak_imbalance, measured at its ep
// 2) stay on the plans at ep 2 and are set back to 0 (the bound) on the others: at ep 1 they would be refused (above
// its bound 1), at ep 4 they would size another routing.
TEST_F(EpPlanSearch, OverridesSelectThePlanFromASourceAtCpAndEp) {
  const std::string path = write("moe.json", kMoe);
  const std::vector<std::string> source = {"parallel.expert_model_parallel_size=2", "parallel.context_parallel_size=2",
                                           "parallel.ep_stash_imbalance=1.25", "parallel.ep_peak_imbalance=1.5"};
  const SearchResult r = search_plans(path, source, profile(), SearchOptions{4, 0});
  const config::RunConfig base = config::load_config(path, source);
  int without_cp = 0, without_ep = 0;
  for (const auto& e : r.ranked) {
    std::vector<std::string> all = source;
    for (const auto& o : e.choice.overrides()) all.push_back(o);
    EXPECT_EQ(config::to_json(config::load_config(path, all)), config::to_json(e.choice.apply_to(base)))
        << e.choice.layout();
    without_cp += e.choice.cp == 1;
    without_ep += e.choice.ep == 1;
    EXPECT_EQ(e.choice.ep_stash_imbalance, e.choice.ep == 2 ? 1.25 : 0.0) << e.choice.layout();
    EXPECT_EQ(e.choice.ep_peak_imbalance, e.choice.ep == 2 ? 1.5 : 0.0) << e.choice.layout();
    // What its memory plan sized the rows at (`cleave plan --json`'s ep_memory_imbalance): the keys at ep 2, the
    // bound min(k 2, E 8 / 4) x 4 / 2 = 4 at ep 4, 1 without ep.
    EXPECT_EQ(e.ep_memory.stash, e.choice.ep == 2 ? 1.25 : e.choice.ep == 4 ? 4.0 : 1.0) << e.choice.layout();
    EXPECT_EQ(e.ep_memory.peak, e.choice.ep == 2 ? 1.5 : e.choice.ep == 4 ? 4.0 : 1.0) << e.choice.layout();
  }
  EXPECT_GT(without_cp, 0);
  EXPECT_GT(without_ep, 0);
}

TEST_F(EpPlanSearch, ChoosesExpertParallelWhenExpertsDoNotFitOtherwise) {
  // One moe block (pp cannot split its experts) and two heads (tp at most 2 splits them in two): with X the
  // experts' f32 bytes, ep 4 (or ep 2 x tp 2) holds 1 X in all (a quarter each of parameters, AdamW's two
  // moments and the gradients), while tp2 with ZeRO 1 or 2 needs about 1.5 X and tp2 with ZeRO-3
  // about 1.75 X (the block's experts gathered in full, their gradients in full until reduced); experts of width
  // 512 make X dominate the activations.
  std::string text = kMoe;
  text.replace(text.find("\"n_layers\": 2, \"n_heads\": 4"), 27, "\"n_layers\": 1, \"n_heads\": 2");
  text.replace(text.find("\"ffn_hidden_size\": 64"), 21, "\"ffn_hidden_size\": 512");
  const std::string config = write("moe.json", text);
  const SearchResult open = search_plans(config, {}, profile(), SearchOptions{4, 0});
  std::int64_t least_without = -1, least_with = -1;
  for (const auto& e : open.ranked) {
    std::int64_t& least = e.choice.ep > 1 ? least_with : least_without;
    if (least < 0 || e.peak_bytes < least) least = e.peak_bytes;
  }
  ASSERT_GT(least_without, 0);
  ASSERT_GT(least_with, 0);
  ASSERT_LT(least_with, least_without);  // the experts dominate: splitting them beats any ZeRO stage, tp or pp
  const SearchResult capped = search_plans(config, {}, profile(), SearchOptions{4, least_without - 1});
  ASSERT_FALSE(capped.ranked.empty());
  for (const auto& e : capped.ranked) EXPECT_GT(e.choice.ep, 1) << e.choice.layout();
}

}  // namespace
}  // namespace cleave::planner::ep_plan_test
