// Ranks sharing a node's cores: a profile measured with R ranks on C cores prices a plan with R' ranks per node
// by the cores each rank then gets (the trainer's thread rule), so an oversubscribed layout is never predicted
// faster than the cores allow: 4 ranks on 2 cores cannot beat one rank that had both cores to itself. Without a
// core count (a GPU profile) nothing is scaled. The warning names the layout, the ranks and the cores.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"

namespace cleave::planner {
namespace {

namespace fs = std::filesystem;

class CoreSharing : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cleave_core_sharing_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    config_ = (dir_ / "tiny.json").string();
    std::ofstream(config_) << R"({"model": {"type": "gpt", "vocab_size": 72, "d_model": 40, "n_layers": 4,
      "n_heads": 4, "seq_len": 12}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Only compute costs time; `cores` cores per node, the rates measured with `measured_ranks` ranks on them.
  static HardwareProfile machine(int cores, int measured_ranks) {
    HardwareProfile p;
    p.name = p.source = "test";
    p.device_type = "cpu";
    p.flops_f32 = p.flops_bf16 = 3e9;
    p.memory_bandwidth_Bps = 1e30;
    p.intra_node = p.inter_node = Link{1e-30, 1e30};
    p.ranks_per_node = 8;
    p.cores_per_node = cores;
    p.measured_ranks_per_node = measured_ranks;
    p.device_memory = 1LL << 30;
    return p;
  }

  fs::path dir_;
  std::string config_;
};

TEST(CoresPerRank, FollowsTheTrainersThreadRule) {
  HardwareProfile p;
  p.cores_per_node = 2;
  p.measured_ranks_per_node = 2;
  EXPECT_DOUBLE_EQ(p.cores_per_rank(1), 2.0);   // two threads
  EXPECT_DOUBLE_EQ(p.cores_per_rank(2), 1.0);
  EXPECT_DOUBLE_EQ(p.cores_per_rank(3), 2.0 / 3);  // time-shared
  EXPECT_DOUBLE_EQ(p.core_sharing(2), 1.0);
  EXPECT_DOUBLE_EQ(p.core_sharing(4), 2.0);
  EXPECT_DOUBLE_EQ(p.core_sharing(3), 1.5);
  EXPECT_DOUBLE_EQ(p.core_sharing(1), 0.5);  // one rank gets both cores the measured rank shared
  p.cores_per_node = 5;                      // 2 ranks of 2 threads: the fifth core idles
  p.measured_ranks_per_node = 1;
  EXPECT_DOUBLE_EQ(p.core_sharing(2), 2.5);
  p.cores_per_node = 0;  // a device per rank
  EXPECT_DOUBLE_EQ(p.core_sharing(64), 1.0);
}

TEST_F(CoreSharing, OversubscribedComputeIsPricedAtItsShareOfTheCores) {
  PlanChoice c{1, 1, 4, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate shared = estimate_plan(config_, {}, c, machine(2, 2), SearchOptions{4, 0});
  const PlanEstimate own = estimate_plan(config_, {}, c, machine(0, 1), SearchOptions{4, 0});
  ASSERT_TRUE(shared.fits && own.fits) << shared.reason << own.reason;
  EXPECT_TRUE(shared.oversubscribed());
  EXPECT_FALSE(own.oversubscribed());
  EXPECT_DOUBLE_EQ(shared.core_sharing, 2.0);
  EXPECT_NEAR(shared.step_s / own.step_s, 2.0, 1e-9);
  EXPECT_NEAR(shared.breakdown.compute_s / own.breakdown.compute_s, 2.0, 1e-9);
  const std::string warning = oversubscription_warning(shared);
  EXPECT_NE(warning.find("tp1 pp1 dp4 puts 4 ranks on a node of 2 cores (2.0 ranks per core)"), std::string::npos)
      << warning;
  EXPECT_EQ(oversubscription_warning(own), "");
}

TEST_F(CoreSharing, NoLayoutOfFourRanksOnTwoCoresBeatsOneRankWithBothCores) {
  // Rates measured by one rank on both cores: its step C1 is the whole machine's work at full speed. Every plan
  // on 4 ranks (2 per core) needs at least C1; without the core count the planner promised C1 / 4.
  const HardwareProfile p = machine(2, 1);
  const SearchResult one = search_plans(config_, {}, p, SearchOptions{1, 0});
  ASSERT_FALSE(one.ranked.empty());
  const double c1 = one.ranked.front().step_s;
  const SearchResult four = search_plans(config_, {}, p, SearchOptions{4, 0});
  ASSERT_FALSE(four.ranked.empty());
  for (const auto& e : four.ranked) {
    EXPECT_GE(e.step_s, c1 * (1 - 1e-9)) << e.choice.layout() << " " << e.choice.schedule;
    EXPECT_DOUBLE_EQ(e.core_sharing, 4.0);
  }
  HardwareProfile unknown = p;
  unknown.cores_per_node = 0;
  const SearchResult blind = search_plans(config_, {}, unknown, SearchOptions{4, 0});
  EXPECT_NEAR(blind.ranked.front().step_s, c1 / 4, 1e-9 * c1);
}

TEST_F(CoreSharing, ProfileFileKeepsCoresAndMeasuredRanks) {
  const std::string path = (dir_ / "p.json").string();
  std::ofstream(path) << profile_to_json(machine(6, 3)).dump();
  const HardwareProfile back = load_profile(path);
  EXPECT_EQ(back.cores_per_node, 6);
  EXPECT_EQ(back.measured_ranks_per_node, 3);
  EXPECT_EQ(profile_to_json(back).dump(), profile_to_json(machine(6, 3)).dump());
}

}  // namespace
}  // namespace cleave::planner
