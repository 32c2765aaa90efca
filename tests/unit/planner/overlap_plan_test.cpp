// The planner's prediction of DualPipeV's overlapped F&B pairs (parallel.moe_a2a_overlap; engine/planner/
// step_terms_step.cpp, pipeline/simulator.hpp): at pp 2 × ep 2 on a profile where the all-to-alls cost something, the
// overlapped plan's exposed expert_all_to_all term is smaller than the plain plan's and the difference is reported
// as hidden; the exposed and hidden parts add up to the plain plan's term; the terms still sum to the step, which
// is no longer than the plain one. Without the key nothing is hidden. Over more ranks than cores nothing is hidden
// from the step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "engine/planner/plan_search.hpp"
#include "engine/planner/step_breakdown.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::overlap_plan_test {
namespace {

namespace fs = std::filesystem;
using T = StepTerm;

// The DualPipeV pp 2 × ep 2 moe config the tests plan, written to a directory of its own (`tag` tells the tests'
// apart), removed when it goes.
struct MoeConfigFile {
  fs::path dir;
  std::string path;
  explicit MoeConfigFile(const std::string& tag)
      : dir(fs::temp_directory_path() / ("cleave_overlap_plan_test_" + tag + std::to_string(::getpid()))),
        path((dir / "moe.json").string()) {
    fs::create_directories(dir);
    std::ofstream(path) << R"({"model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4,
        "seq_len": 16, "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2},
        "batch": {"global_batch_size": 16, "micro_batch_size": 1},
        "parallel": {"pipeline_model_parallel_size": 2, "expert_model_parallel_size": 2, "schedule": "dualpipev"},
        "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  }
  ~MoeConfigFile() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  MoeConfigFile(const MoeConfigFile&) = delete;
  MoeConfigFile& operator=(const MoeConfigFile&) = delete;
};

HardwareProfile slow_links() { return testing::synthetic_profile(1e9, 1e9, Link{2e-4, 1e8}, Link{5e-4, 1e7}, 4); }

TEST(OverlapPlan, OverlappedPairsHideExpertAllToAllTime) {
  const MoeConfigFile file("");
  const std::string& moe = file.path;
  const std::vector<std::string> on = {"parallel.moe_a2a_overlap=true"};
  const PlanChoice c = choice_of_config(moe, {}, 4);
  ASSERT_EQ(c.ep, 2);
  ASSERT_EQ(c.pp, 2);
  const PlanEstimate plain = estimate_plan(moe, {}, c, slow_links(), SearchOptions{4, 0});
  const PlanEstimate overlapped = estimate_plan(moe, on, choice_of_config(moe, on, 4), slow_links(), SearchOptions{4, 0});
  ASSERT_TRUE(plain.valid) << plain.reason;
  ASSERT_TRUE(overlapped.valid) << overlapped.reason;
  const auto hidden = [](const PlanEstimate& e) { return e.breakdown.hidden[static_cast<std::size_t>(T::kExpertAllToAll)]; };
  EXPECT_GT(plain.breakdown[T::kExpertAllToAll], 0.0);
  EXPECT_EQ(hidden(plain), 0.0);
  EXPECT_GT(hidden(overlapped), 0.0);
  EXPECT_LT(overlapped.breakdown[T::kExpertAllToAll], plain.breakdown[T::kExpertAllToAll]);
  // The same all-to-alls on the same busiest rank: exposed + hidden is the plain term.
  EXPECT_EQ(overlapped.breakdown.rank, plain.breakdown.rank);
  EXPECT_NEAR(overlapped.breakdown[T::kExpertAllToAll] + hidden(overlapped), plain.breakdown[T::kExpertAllToAll],
              1e-9 * plain.step_s);
  EXPECT_NEAR(overlapped.breakdown.total(), overlapped.step_s, 1e-9 * overlapped.step_s);
  EXPECT_LT(overlapped.step_s, plain.step_s);
}

// More ranks than cores (4 on 2): a waiting rank's core runs another rank, so what the pairs hand off buys no step time
// (pipeline::PairCores::kShared, overlap_pair_timing.hpp; measured in benchmarks/moe/RESULTS-2026-12-01-n-dpv-overlap.md):
// the overlapped plan's exposed term is the plain plan's (its core-holder waits, ep_core_holder_wait_s, with it), it
// hides nothing, and its step is no shorter. With a device per rank the same pairs hide most of the (fast) all-to-alls.
TEST(OverlapPlan, OverlappedPairsOnSharedCoresHideNoStepTime) {
  const MoeConfigFile file("h");
  const std::string& moe = file.path;
  HardwareProfile cores = slow_links();
  cores.intra_node = cores.inter_node = Link{1e-7, 1e11};
  cores.device_type = DeviceType::kCpu;
  cores.cores_per_node = 2;
  cores.measured_ranks_per_node = 2;
  HardwareProfile devices = cores;
  devices.cores_per_node = 0;
  const std::vector<std::string> on = {"parallel.moe_a2a_overlap=true"};
  const PlanChoice c = choice_of_config(moe, {}, 4), co = choice_of_config(moe, on, 4);
  const PlanEstimate plain = estimate_plan(moe, {}, c, cores, SearchOptions{4, 0});
  const PlanEstimate plain_own = estimate_plan(moe, {}, c, devices, SearchOptions{4, 0});
  const PlanEstimate overlapped = estimate_plan(moe, on, co, cores, SearchOptions{4, 0});
  const PlanEstimate overlapped_own = estimate_plan(moe, on, co, devices, SearchOptions{4, 0});
  ASSERT_TRUE(plain.valid && plain_own.valid && overlapped.valid && overlapped_own.valid) << plain.reason;
  ASSERT_TRUE(plain.oversubscribed());
  ASSERT_GT(plain.ep_core_holder_wait_s, 0.0);
  const auto hidden = [](const PlanEstimate& e) { return e.breakdown.hidden[static_cast<std::size_t>(T::kExpertAllToAll)]; };
  const double holders = plain.breakdown[T::kExpertAllToAll] - plain_own.breakdown[T::kExpertAllToAll];
  ASSERT_GT(holders, 0.0);
  // With a device per rank the pairs hide nearly all of the (fast) all-to-alls; on 2 cores the holders' waits stay.
  EXPECT_LT(overlapped_own.breakdown[T::kExpertAllToAll], 0.5 * plain_own.breakdown[T::kExpertAllToAll]);
  EXPECT_GT(hidden(overlapped_own), 0.0);
  EXPECT_LT(overlapped_own.step_s, plain_own.step_s);
  EXPECT_GE(overlapped.breakdown[T::kExpertAllToAll], holders * (1 - 1e-9));
  EXPECT_EQ(hidden(overlapped), 0.0);
  EXPECT_NEAR(overlapped.breakdown[T::kExpertAllToAll], plain.breakdown[T::kExpertAllToAll], 1e-9 * plain.step_s);
  EXPECT_GE(overlapped.step_s, plain.step_s * (1 - 1e-12));
}

}  // namespace
}  // namespace cleave::planner::overlap_plan_test
