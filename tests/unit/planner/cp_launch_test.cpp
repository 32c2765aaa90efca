// block_compute under context parallelism (engine/planner/step_terms_compute.cpp): a cp rank runs every kernel of a
// block on its own T / cp rows, so its GEMMs and streamed bytes are ÷ cp but its kernel launches are as many as at
// cp 1. On a roofline profile each pass total is (total - launches) / cp + launches, and the launch part equals cp 1's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/step_terms.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/block_work.hpp"
#include "partition/hardware_profile.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner {
namespace {

// Blocks short enough that launches are a visible part of each pass on an H100.
constexpr const char* kGpt = R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2,
  "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

class CpLaunches : public testing::ScratchDirTest {
 protected:
  CpLaunches() : ScratchDirTest("cleave_cp_launch_test_") {}

  // Block b's compute on `cp` ranks of a world of 2 (cp 1: dp 2), priced on the shipped H100 roofline profile.
  BlockCompute compute(int cp, int b, const std::string& attention = "") {
    const std::string path = write("gpt.json", kGpt);
    std::vector<std::string> overrides = {"parallel.context_parallel_size=" + std::to_string(cp)};
    config::RunConfig resolved = config::parse_config(kGpt, "<string>", overrides);
    resolved.resolve(2);
    const run_plan::Plan plan =
        run_plan::make_plan(resolved, static_cast<int>(resolved.resolved_batch().gradient_accumulation_steps), 0);
    const PlanChoice choice = choice_of_config(path, overrides, 2);
    EXPECT_EQ(choice.cp, cp);
    SearchOptions options{2, 0};
    if (!attention.empty()) options.attention = partition::AttentionKind::kProbabilities;
    const TermContext c = make_term_context(plan, resolved, choice, h100_, options, 1.0);
    return block_compute(c, b, 0.0);
  }

  partition::HardwareProfile h100_ =
      partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
};

TEST_F(CpLaunches, ACpRankLaunchesEveryKernelAndSplitsTheRest) {
  const int b = 1;  // the first transformer block (attention and MLP)
  const BlockCompute one = compute(1, b), two = compute(2, b);
  ASSERT_GT(one.launch.forward_s, 0.0);  // a roofline profile prices launches
  // The same kernels per pass on every cp rank: the launch part is cp 1's, not half of it.
  EXPECT_DOUBLE_EQ(two.launch.forward_s, one.launch.forward_s);
  EXPECT_DOUBLE_EQ(two.launch.input_grad_s, one.launch.input_grad_s);
  EXPECT_DOUBLE_EQ(two.launch.weight_grad_s, one.launch.weight_grad_s);
  // Bytes and GEMMs over T / cp rows: the rest of each pass is halved.
  EXPECT_DOUBLE_EQ(two.elementwise.forward_s, one.elementwise.forward_s / 2);
  const auto split = [](double total, double launch) { return (total - launch) / 2 + launch; };
  EXPECT_NEAR(two.forward_s, split(one.forward_s, one.launch.forward_s), 1e-12 * one.forward_s);
  EXPECT_NEAR(two.input_grad_s, split(one.input_grad_s, one.launch.input_grad_s), 1e-12 * one.input_grad_s);
  EXPECT_NEAR(two.weight_grad_s, split(one.weight_grad_s, one.launch.weight_grad_s), 1e-12 * one.weight_grad_s);
  EXPECT_GT(two.forward_s, one.forward_s / 2);  // what ÷ cp of the whole priced
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
}  // namespace cleave::planner
