// Ranks sharing a node's cores: a profile measured with R ranks on C cores prices a plan with R' ranks per node
// by the cores each rank then gets (the trainer's thread rule), so an oversubscribed layout is never predicted
// faster than the cores allow: 4 ranks on 2 cores cannot beat one rank that had both cores to itself. Without a
// core count (a GPU profile) nothing is scaled. The warning names the layout, the ranks and the cores. A CPU
// profile made for fewer ranks than the plan's world puts the world on its one node (planning_setup); the cores the
// figures were measured on (measured_cores) price them, and a profile without the key is taken as measured on its
// cores_per_node. Sharing cores never prices a plan below itself on more cores, overlaps included.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "support/scratch_dir_test.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::core_sharing_test {
namespace {

namespace fs = std::filesystem;

class CoreSharing : public testing::ScratchDirTest {
 protected:
  CoreSharing() : ScratchDirTest("cleave_core_sharing_test_") {}

  void SetUp() override {
    ScratchDirTest::SetUp();
    config_ = (dir_ / "tiny.json").string();
    std::ofstream(config_) << R"({"model": {"type": "gpt", "vocab_size": 72, "d_model": 40, "n_layers": 4,
      "n_heads": 4, "seq_len": 12}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
  }

  // Only compute costs time; `cores` cores per node, the rates measured with `measured_ranks` ranks on them.
  static HardwareProfile machine(int cores, int measured_ranks) {
    HardwareProfile p = testing::synthetic_profile(3e9, 1e30, Link{1e-30, 1e30}, Link{1e-30, 1e30}, 8);
    p.device_type = DeviceType::kCpu;
    p.cores_per_node = cores;
    p.measured_ranks_per_node = measured_ranks;
    p.device_memory = 1LL << 30;
    return p;
  }

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

TEST_F(CoreSharing, SharedCoresNeverPriceAPlanBelowItsTwinOnMoreCores) {
  // The same plans, 4 ranks on a 2-core node (compute x2) and on a 4-core one, with links that cost time: every
  // plan costs between 1 and 2 times its 4-core twin (a pipeline's, tp's and cp's waits for cores' holders beyond that),
  // context parallelism's ring and ZeRO-3 included, at compute
  // rates from where compute dominates to where the links do. (The ring's K/V hops and ZeRO-3's prefetch used to
  // hide under the same compute, so doubling the compute hid both twice over: cp4 ring + ZeRO-3 plans were priced
  // below their twin; so did a per-micro-batch reduction and a fused backward's prefetch, both under W.)
  for (const double flops : {3e9, 3e10, 3e11}) {
    HardwareProfile two = machine(2, 2), four = machine(4, 2);
    two.intra_node = two.inter_node = four.intra_node = four.inter_node = Link{2e-5, 2e9};
    two.measured_cores = four.measured_cores = 2;
    two.flops_f32 = two.flops_bf16 = four.flops_f32 = four.flops_bf16 = flops;
    const SearchResult shared = search_plans(config_, {}, two, SearchOptions{4, 0});
    const SearchResult spread = search_plans(config_, {}, four, SearchOptions{4, 0});
    std::map<std::vector<std::string>, const PlanEstimate*> twin;
    for (const auto& e : spread.ranked) twin[e.choice.overrides()] = &e;
    int compared = 0, context_parallel = 0;
    double highest = 1;
    std::string worst;
    for (const auto& e : shared.ranked) {
      const auto it = twin.find(e.choice.overrides());
      if (it == twin.end()) continue;
      ++compared;
      context_parallel += e.choice.cp > 1;
      // A pipeline's transfers on shared cores also wait for their core's holder (core_holder_wait_s), which no
      // compute factor holds: at most every transfer's wait on top of the doubled compute.
      const double transfers = e.choice.pp > 1 ? 2.0 * (e.choice.pp * e.choice.virtual_stages - 1) *
                                                     (e.choice.global_batch / (e.choice.micro_batch * e.choice.dp))
                                               : 0.0;
      double waits = transfers * e.core_holder_wait_s;
      if (e.choice.pp > 1) {
        EXPECT_GT(e.core_holder_wait_s, 0) << e.choice.layout();
      }
      // So do tp and cp's meetings for their peers' holders (peer_core_holder_wait_s), in their own terms: at most
      // what those terms add over the twin's (the ring's hops hide more under the doubled compute, never less), and
      // in a pipeline the fill and drain stretch with the actions: × (m + stages per pipeline − 1) / m.
      if (e.choice.tp > 1 || e.choice.cp > 1) {
        EXPECT_GT(e.group_core_holder_wait_s, 0) << e.choice.layout();
        const auto group = [](const PlanEstimate& x) {
          return x.breakdown[StepTerm::kTensorParallel] + x.breakdown[StepTerm::kContextParallel];
        };
        const double m = static_cast<double>(e.choice.global_batch) / (e.choice.micro_batch * e.choice.dp);
        waits += std::max(0.0, group(e) - group(*it->second)) * (m + e.choice.pp * e.choice.virtual_stages - 1) / m;
      }
      if ((e.step_s - waits) / it->second->step_s > highest) {
        highest = (e.step_s - waits) / it->second->step_s;
        worst = e.choice.layout() + " " + e.choice.schedule + " micro " + std::to_string(e.choice.micro_batch);
      }
      EXPECT_GE(e.step_s, it->second->step_s * (1 - 1e-9)) << flops << " FLOP/s: " << e.choice.layout() << " "
                                                   << e.choice.schedule << " zero " << e.choice.zero_label()
                                                   << " micro " << e.choice.micro_batch;
    }
    EXPECT_LE(highest, 2 * (1 + 1e-9)) << flops << " FLOP/s: " << worst;
    EXPECT_GT(compared, 1000);
    EXPECT_GT(context_parallel, 100);
  }
}

TEST_F(CoreSharing, ACpuProfileForFewerRanksPlansTheWorldOnItsOneNode) {
  // The issue's case: `cleave profile` under mpiexec -n 2 on 2 cores wrote ranks_per_node 2; `cleave plan --world 4
  // --profile` spread the 4 ranks over two imaginary 2-core nodes: no warning, no sharing priced.
  HardwareProfile p = machine(2, 2);
  p.ranks_per_node = 2;
  const std::string path = (dir_ / "two_ranks.json").string();
  std::ofstream(path) << profile_to_json(p).dump();
  const PlanningSetup setup = planning_setup(config::load_config(config_, {}), path, "", 4);
  EXPECT_EQ(setup.profile.ranks_per_node, 4);
  EXPECT_EQ(setup.options.memory_limit, (1LL << 30) / 2);  // the machine's memory over 4 ranks, not 2
  PlanChoice c{1, 1, 4, 1, "1f1b", 2, 0, partition::Recompute::kNone, 8, false};
  const PlanEstimate shared = estimate_plan(config_, {}, c, setup.profile, setup.options);
  ASSERT_TRUE(shared.fits) << shared.reason;
  EXPECT_EQ(shared.ranks_on_node, 4);
  EXPECT_DOUBLE_EQ(shared.core_sharing, 2.0);
  EXPECT_NE(oversubscription_warning(shared).find("puts 4 ranks on a node of 2 cores"), std::string::npos);
  // As it was read before: two nodes of 2 ranks each, priced as measured.
  const PlanEstimate spread = estimate_plan(config_, {}, c, p, SearchOptions{4, 0});
  EXPECT_EQ(spread.ranks_on_node, 2);
  EXPECT_FALSE(spread.oversubscribed());
  EXPECT_GT(shared.breakdown.compute_s, 1.99 * spread.breakdown.compute_s);
  // A cuda profile keeps its devices per node.
  HardwareProfile gpu = machine(0, 1);
  gpu.device_type = DeviceType::kCuda;
  gpu.ranks_per_node = 2;
  const std::string gpu_path = (dir_ / "gpu.json").string();
  std::ofstream(gpu_path) << profile_to_json(gpu).dump();
  EXPECT_EQ(planning_setup(config::load_config(config_, {}), gpu_path, "", 4).profile.ranks_per_node, 2);
}

TEST_F(CoreSharing, MeasuredCoresPriceTheFiguresConditionsAndOldProfilesAssumeTheNodes) {
  // Measured with 2 ranks on 2 cores (a core each), planned on a node of 8 cores with 4 ranks (2 cores each):
  // compute takes half as long. The same file without measured_cores (written before the key) is taken as
  // measured on the node's 8 cores (4 each with 2 ranks): 4 ranks then take twice as long.
  HardwareProfile p = machine(8, 2);
  p.measured_cores = 2;
  EXPECT_DOUBLE_EQ(p.core_sharing(4), 0.5);
  const std::string path = (dir_ / "target.json").string();
  std::ofstream(path) << profile_to_json(p).dump();
  const HardwareProfile back = load_profile(path);
  EXPECT_EQ(back.measured_cores, 2);
  EXPECT_DOUBLE_EQ(back.core_sharing(4), 0.5);
  nlohmann::json old = profile_to_json(p);
  old.erase("measured_cores");
  const std::string old_path = (dir_ / "old.json").string();
  std::ofstream(old_path) << old.dump();
  const HardwareProfile assumed = load_profile(old_path);
  EXPECT_EQ(assumed.measured_cores, 8);
  EXPECT_DOUBLE_EQ(assumed.core_sharing(4), 2.0);
  // measured_cores without cores_per_node (a cuda profile) is refused naming the key.
  nlohmann::json bad = profile_to_json(machine(0, 1));
  bad["device_type"] = "cuda";
  bad["measured_cores"] = 4;
  const std::string bad_path = (dir_ / "bad.json").string();
  std::ofstream(bad_path) << bad.dump();
  try {
    load_profile(bad_path);
    ADD_FAILURE() << "measured_cores without cores_per_node accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'measured_cores' needs 'cores_per_node'"), std::string::npos) << e.what();
  }
}

TEST_F(CoreSharing, ProfileFileKeepsCoresAndMeasuredRanks) {
  const std::string path = (dir_ / "p.json").string();
  std::ofstream(path) << profile_to_json(machine(6, 3)).dump();
  const HardwareProfile back = load_profile(path);
  EXPECT_EQ(back.cores_per_node, 6);
  EXPECT_EQ(back.measured_ranks_per_node, 3);
  EXPECT_EQ(back.measured_cores, 6);  // written as the node's cores when not set
  EXPECT_EQ(profile_to_json(back).dump(), profile_to_json(machine(6, 3)).dump());
}

}  // namespace
}  // namespace cleave::planner::core_sharing_test
