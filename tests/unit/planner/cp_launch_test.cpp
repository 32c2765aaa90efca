// block_compute under context parallelism (engine/planner/step_terms_compute.cpp): a cp rank runs every kernel of a
// block on its own T / cp rows, so its GEMMs and streamed bytes are ÷ cp but its kernel launches are as many as at
// cp 1. On a roofline profile each pass total is (total - launches) / cp + launches, and the launch part equals cp 1's,
// besides what the cp attention core runs beyond that share (cp_core: ring's chunk pairs, merges and copies; all_to_all's
// permutes), whose kernels are counted here by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/step_terms.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/block_work.hpp"
#include "partition/cp_core_work.hpp"
#include "partition/hardware_profile.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::cp_launch_test {
namespace {

// Blocks short enough that launches are a visible part of each pass on an H100.
constexpr const char* kGpt = R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2,
  "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

class CpLaunches : public testing::ScratchDirTest {
 protected:
  CpLaunches() : ScratchDirTest("cleave_cp_launch_test_") {}

  // The term context of `cp` ranks of a world of 2 (cp 1: dp 2), priced on the shipped H100 roofline profile; its
  // plan, config and choice are kept by the fixture.
  const TermContext& context(int cp, const std::string& attention = "") {
    const std::string path = write("gpt.json", kGpt);
    std::vector<std::string> overrides = {"parallel.context_parallel_size=" + std::to_string(cp),
                                          "parallel.context_parallel_comm=" + comm_};
    resolved_ = config::parse_config(kGpt, "<string>", overrides);
    resolved_.resolve(2);
    plan_ = run_plan::make_plan(resolved_, static_cast<int>(resolved_.resolved_batch().gradient_accumulation_steps), 0);
    choice_ = choice_of_config(path, overrides, 2);
    EXPECT_EQ(choice_.cp, cp);
    options_ = SearchOptions{2, 0};
    if (!attention.empty()) options_.attention = partition::AttentionKind::kProbabilities;
    context_ = make_term_context(plan_, resolved_, choice_, h100_, options_, 1.0);
    return context_;
  }

  // Block b's compute at `cp` (above).
  BlockCompute compute(int cp, int b, const std::string& attention = "") {
    return block_compute(context(cp, attention), b, 0.0);
  }

  std::string comm_ = "ring";
  config::RunConfig resolved_;
  run_plan::Plan plan_;
  PlanChoice choice_;
  SearchOptions options_{2, 0};
  TermContext context_;

  partition::HardwareProfile h100_ =
      partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
};

TEST_F(CpLaunches, ACpRankLaunchesEveryKernelAndSplitsTheRest) {
  const int b = 1;  // the first transformer block (attention and MLP)
  const BlockCompute one = compute(1, b), two = compute(2, b);
  ASSERT_GT(one.launch.forward_s, 0.0);  // a roofline profile prices launches
  // The same kernels per pass on every cp rank: the launch part is cp 1's, not half of it, plus the ring core's own.
  // d32, 4 heads, T 16, micro-batch 1 at cp 2: chunks of 4 tokens, 5 chunk-pair calls on each rank. F: q, k, v chunks
  // taken (2 × 3), out and lse filled (2 × 2), a call and a merge per pair (2 × 5), the output put back (2), less one
  // rank's fused kernel; I: dout's chunks (2), dq, dK, dV filled (6), 2 kernels per pair call (10), dqkv put (2 × 3),
  // less one rank's 2.
  const double launch = h100_.kernel_launch_s;
  EXPECT_NEAR(two.launch.forward_s - one.launch.forward_s, (6 + 4 + 10 + 2 - 1) * launch, 1e-15);
  EXPECT_NEAR(two.launch.input_grad_s - one.launch.input_grad_s, (2 + 6 + 10 + 6 - 2) * launch, 1e-15);
  EXPECT_DOUBLE_EQ(two.launch.weight_grad_s, one.launch.weight_grad_s);
  EXPECT_DOUBLE_EQ(two.cp_core.weight_grad_s, 0.0);
  // Bytes and GEMMs over T / cp rows: the rest of each pass is halved, but the core's extra.
  const CpCoreCompute core = cp_core_compute(context(2), b);
  EXPECT_DOUBLE_EQ(two.cp_core.forward_s, core.total.forward_s);
  EXPECT_GT(core.elementwise.forward_s, 0.0);
  EXPECT_NEAR(two.elementwise.forward_s - core.elementwise.forward_s, one.elementwise.forward_s / 2, 1e-18);
  const auto split = [](double total, double launch) { return (total - launch) / 2 + launch; };
  EXPECT_NEAR(two.forward_s - two.cp_core.forward_s, split(one.forward_s, one.launch.forward_s), 1e-12 * one.forward_s);
  EXPECT_NEAR(two.input_grad_s - two.cp_core.input_grad_s, split(one.input_grad_s, one.launch.input_grad_s),
              1e-12 * one.input_grad_s);
  EXPECT_NEAR(two.weight_grad_s, split(one.weight_grad_s, one.launch.weight_grad_s), 1e-12 * one.weight_grad_s);
  EXPECT_GT(two.forward_s, one.forward_s / 2);  // what ÷ cp of the whole priced
}

TEST_F(CpLaunches, TheCpCoreIsPricedFromItsWorkOnTheProfile) {
  const int b = 1;
  for (const char* comm : {"ring", "all_to_all"}) {
    comm_ = comm;
    const TermContext c = context(2);
    const CpCoreCompute core = cp_core_compute(c, b);
    const partition::CpCoreWork work = partition::cp_core_work(c.plan->spec.blocks[1], DType::kF32,
                                                               partition::Recompute::kNone, 1, 2, comm_ == "ring", 1);
    const partition::CpCorePass& f = work.forward;
    EXPECT_DOUBLE_EQ(core.elementwise.forward_s, f.extra.stream_bytes / h100_.memory_bandwidth_Bps) << comm;
    EXPECT_DOUBLE_EQ(core.launch.forward_s, f.extra.kernels * h100_.kernel_launch_s) << comm;
    // The products as the core launches them (ring: each chunk pair; all_to_all: heads / cp) against one
    // rank's ÷ cp (at this size both sit on the curve's flat start: no difference).
    const double products = h100_.gemm_pass_seconds(f.products, false) - h100_.gemm_pass_seconds(f.replaced, false) / 2;
    EXPECT_GE(products, 0.0) << comm;
    EXPECT_NEAR(core.total.forward_s, core.elementwise.forward_s + core.launch.forward_s + products, 1e-18) << comm;
    EXPECT_DOUBLE_EQ(core.total.recompute_s, 0.0) << comm;
  }
  // At a long sequence the smaller launches reach less of the peak: GPT-3 XL's width (d 2048, 16 heads) at T 8192, a
  // bf16 run at cp 4: ring's chunk pairs of 1,024 tokens, all_to_all's 4 heads of 16 over all 8,192.
  partition::GptConfig big;
  big.vocab_size = 64;
  big.d_model = 2048;
  big.n_layers = 1;
  big.n_heads = 16;
  big.seq_len = 8192;
  const partition::BlockSpec block = partition::make_gpt_spec(big).blocks[1];
  for (const bool ring : {true, false}) {
    const partition::CpCorePass f =
        partition::cp_core_work(block, DType::kBF16, partition::Recompute::kNone, 1, 4, ring, 1).forward;
    EXPECT_GT(h100_.gemm_pass_seconds(f.products, true), h100_.gemm_pass_seconds(f.replaced, true) / 4)
        << ring;
  }
}

TEST_F(CpLaunches, StoredProbabilitiesKeepTheirExtraLaunchesWhole) {
  const int b = 1;
  const BlockCompute one = compute(1, b, "probabilities"), two = compute(2, b, "probabilities");
  ASSERT_NE(one.probabilities.launch_forward_s, 0.0);
  EXPECT_DOUBLE_EQ(two.probabilities.launch_forward_s, one.probabilities.launch_forward_s);
  const ProbabilitiesCompute& p = one.probabilities;
  EXPECT_NEAR(two.probabilities.forward_s, (p.forward_s - p.launch_forward_s) / 2 + p.launch_forward_s,
              1e-12 * std::abs(p.forward_s));
  EXPECT_NEAR(two.probabilities.input_grad_s, (p.input_grad_s - p.launch_input_grad_s) / 2 + p.launch_input_grad_s,
              1e-12 * std::abs(p.input_grad_s));
}

}  // namespace
}  // namespace cleave::planner::cp_launch_test
