// The plan search: never ranks a plan over the cap; tp only where heads and d_ff divide; dp only where the
// global batch divides; a search whose best plan is known by hand (free communication: the best step is
// the total compute over the world, with no bubble); profile files refused with the key at fault; the
// smallest cap that admits a plan admits exactly the plans at or under it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "engine/core/error.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"

namespace cleave::planner {
namespace {

namespace fs = std::filesystem;

class PlanSearch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cleave_plan_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string tiny_gpt(int n_heads = 4, int global_batch = 8) {
    return write("tiny.json", R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 48, "n_layers": 4, "n_heads": )" +
                                  std::to_string(n_heads) + R"(, "seq_len": 16},
      "batch": {"global_batch_size": )" + std::to_string(global_batch) + R"(},
      "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})");
  }

  // Communication and the optimizer are (almost) free: only compute costs time.
  static HardwareProfile free_links() {
    HardwareProfile p;
    p.name = "test";
    p.source = "test";
    p.flops_f32 = p.flops_bf16 = 1e9;
    p.memory_bandwidth_Bps = 1e30;
    p.intra_node = p.inter_node = Link{1e-30, 1e30};
    p.ranks_per_node = 8;
    return p;
  }

  fs::path dir_;
};

TEST_F(PlanSearch, NeverRanksAPlanOverTheCap) {
  const std::string config = tiny_gpt();
  SearchOptions options{4, 0};
  const SearchResult all = search_plans(config, {}, free_links(), options);
  ASSERT_FALSE(all.ranked.empty());
  std::int64_t smallest = all.ranked.front().peak_bytes, largest = 0;
  for (const auto& e : all.ranked) {
    smallest = std::min(smallest, e.peak_bytes);
    largest = std::max(largest, e.peak_bytes);
  }
  ASSERT_LT(smallest, largest);
  options.memory_limit = (smallest + largest) / 2;
  const SearchResult capped = search_plans(config, {}, free_links(), options);
  ASSERT_FALSE(capped.ranked.empty());
  for (const auto& e : capped.ranked) EXPECT_LE(e.peak_bytes, options.memory_limit) << e.choice.layout();
  std::size_t over = 0;
  for (const auto& e : capped.rejected) {
    if (e.valid) {
      EXPECT_GT(e.peak_bytes, options.memory_limit);
      EXPECT_NE(e.reason.find("> cap"), std::string::npos) << e.reason;
      ++over;
    }
  }
  EXPECT_EQ(capped.ranked.size() + over, all.ranked.size());
  options.memory_limit = smallest - 1;
  EXPECT_TRUE(search_plans(config, {}, free_links(), options).ranked.empty());
}

TEST_F(PlanSearch, TensorParallelOnlyWhereHeadsDivideAndDataParallelOnlyWhereTheBatchDivides) {
  // 6 heads, d_ff 192: tp 1, 2, 3, 6 divide both; on 4 ranks tp is 1 or 2. Global batch 6: dp 4 is refused.
  const SearchResult r = search_plans(tiny_gpt(6, 6), {}, free_links(), SearchOptions{4, 0});
  std::set<int> tps, dps;
  for (const auto& e : r.ranked) {
    tps.insert(e.choice.tp);
    dps.insert(e.choice.dp);
    EXPECT_EQ(e.choice.tp * e.choice.pp * e.choice.dp, 4);
    EXPECT_EQ(6 % (e.choice.dp * e.choice.micro_batch), 0);
  }
  EXPECT_EQ(tps, (std::set<int>{1, 2}));
  EXPECT_EQ(dps.count(4), 0u);
  bool dp4_reason = false;
  for (const auto& e : r.rejected) dp4_reason |= e.reason.find("not divisible by dp 4") != std::string::npos;
  EXPECT_TRUE(dp4_reason);
}

TEST_F(PlanSearch, WithFreeCommunicationTheBestPlanSplitsComputeEvenlyWithNoBubble) {
  const std::string config = tiny_gpt();
  const SearchResult r = search_plans(config, {}, free_links(), SearchOptions{2, 0});
  ASSERT_FALSE(r.ranked.empty());
  // By hand: one rank computes C per step (pp1 dp1 on world 1); on 2 ranks the best a plan can do is C / 2:
  // dp2 or tp2 (free collectives) have no bubble and split every block evenly.
  const SearchResult one = search_plans(config, {}, free_links(), SearchOptions{1, 0});
  ASSERT_FALSE(one.ranked.empty());
  const double total = one.ranked.front().step_s;
  const PlanEstimate& best = r.ranked.front();
  EXPECT_EQ(best.choice.pp, 1) << best.choice.layout() << " " << best.choice.schedule;
  EXPECT_NEAR(best.step_s, total / 2, 1e-9 * total);
  EXPECT_EQ(best.bubble, 0.0);
  // Every pipelined plan pays a bubble, so ranks below it.
  for (const auto& e : r.ranked) {
    if (e.choice.pp > 1) {
      EXPECT_GT(e.bubble, 0.0);
      EXPECT_GT(e.step_s, best.step_s);
    }
  }
}

TEST_F(PlanSearch, ProfilesAreCheckedKeyByKey) {
  EXPECT_THROW(load_profile((dir_ / "missing.json").string()), Error);
  const std::string good = R"({"format": "cleave-hardware-profile", "name": "x", "source": "a datasheet",
    "device_type": "cuda", "sustained_gemm_tflops": {"f32": 10, "bf16": 100}, "memory_bandwidth_GBps": 1000,
    "intra_node": {"latency_us": 5, "bandwidth_GBps": 300}, "inter_node": {"latency_us": 10, "bandwidth_GBps": 25},
    "ranks_per_node": 8, "device_memory_GiB": 80})";
  const HardwareProfile p = load_profile(write("good.json", good));
  EXPECT_DOUBLE_EQ(p.flops_bf16, 100e12);
  EXPECT_DOUBLE_EQ(p.intra_node.latency_s, 5e-6);
  EXPECT_EQ(p.device_memory, 80LL << 30);
  auto message = [&](const std::string& text) {
    try {
      load_profile(write("bad.json", text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string bad = good;
  bad.replace(bad.find("\"bf16\": 100"), 11, "\"bf16\": -1");
  EXPECT_NE(message(bad).find("'bf16' must be a number > 0"), std::string::npos) << message(bad);
  bad = good;
  bad.replace(bad.find("\"source\": \"a datasheet\""), 23, "\"source\": \"\"");
  EXPECT_NE(message(bad).find("'source' must say where"), std::string::npos) << message(bad);
  EXPECT_NE(message("{\"format\": \"x\"}").find("cleave-hardware-profile"), std::string::npos);
  EXPECT_NE(message("{nope").find("not valid JSON"), std::string::npos);
  // The shipped profiles load.
  for (const char* shipped : {"a100_80gb_sxm.json", "h100_sxm.json"}) {
    const HardwareProfile s = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/" + shipped);
    EXPECT_GT(s.flops_bf16, s.flops_f32) << shipped;
    EXPECT_EQ(s.ranks_per_node, 8) << shipped;
  }
}

TEST(Link, RingAllReduceCost) {
  const Link link{1e-5, 1e9};
  EXPECT_EQ(link.all_reduce_s(1e6, 1), 0.0);
  EXPECT_NEAR(link.all_reduce_s(1e6, 4), 2.0 * 3 / 4 * 1e6 / 1e9 + 6 * 1e-5, 1e-15);
}

}  // namespace
}  // namespace cleave::planner
