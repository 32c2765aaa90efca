// Measured profiles (`cleave profile`): block tables interpolate in the micro-batch and never invent a tp
// width or a shape; the alpha-beta fit recovers a line; a profile file round-trips; the planner times a plan
// from the tables (a step known by hand) and uses a measured collective for the dp reduction; a profile of
// another model is refused by name; the measurement itself runs every block of a tiny GPT at tp 1 and 2.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <fstream>
#include <string>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "partition/measured_costs.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/ep_exchange_measure.hpp"
#include "engine/planner/expert_rows_measure.hpp"
#include "engine/planner/host_routing_measure.hpp"
#include "engine/planner/profile_measure.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::measured_costs_test {
namespace {

namespace fs = std::filesystem;

class MeasuredProfile : public testing::ScratchDirTest {
 protected:
  MeasuredProfile() : ScratchDirTest("cleave_measured_test_") {}

  void SetUp() override {
    ScratchDirTest::SetUp();
    config_ = (dir_ / "tiny.json").string();
    std::ofstream(config_) << R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 48, "n_layers": 4,
      "n_heads": 4, "seq_len": 16}, "batch": {"global_batch_size": 8}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
    spec_ = run_plan::model_spec(config::load_config(config_, {}).model);
  }

  // Every block of the tiny GPT at tp 1, micro-batches 1 and 4: F = 1 ms + 1 ms / sample, I = 2 ms / sample,
  // W = 0.5 ms / sample; links and the optimizer free.
  HardwareProfile table_profile() const {
    HardwareProfile p;
    p.name = "table";
    p.source = "test";
    p.flops_f32 = p.flops_bf16 = 1.0;  // would make any FLOP-based estimate absurdly slow
    p.memory_bandwidth_Bps = 1e30;
    p.intra_node = p.inter_node = Link{1e-30, 1e30};
    p.ranks_per_node = 8;
    p.device_memory = 1LL << 30;
    for (const auto& block : spec_.blocks) {
      for (std::int64_t m : {1, 4}) {
        const double u = static_cast<double>(m);
        const std::string key = partition::block_shape_key(block);
        if (p.measured.covers(key, 1) && m == 1) continue;
        bool seen = false;
        for (const auto& b : p.measured.blocks) seen |= b.shape == key && b.micro_batch == m;
        if (!seen) p.measured.blocks.push_back({key, 1, m, 1e-3 + 1e-3 * u, 2e-3 * u, 0.5e-3 * u});
      }
    }
    return p;
  }

  std::string config_;
  partition::ModelSpec spec_;
};

TEST(BlockShapeKey, NamesEverySizeTheCostDependsOn) {
  partition::GptConfig small, wide;
  wide.d_model = small.d_model * 2;
  partition::ModelSpec a = partition::make_gpt_spec(small), b = partition::make_gpt_spec(wide);
  EXPECT_EQ(partition::block_shape_key(a.blocks[1]), partition::block_shape_key(a.blocks[2]));  // two identical transformer blocks
  EXPECT_NE(partition::block_shape_key(a.blocks[1]), partition::block_shape_key(b.blocks[1]));
  EXPECT_NE(partition::block_shape_key(a.blocks[0]), partition::block_shape_key(a.blocks[1]));
}

TEST_F(MeasuredProfile, InterpolatesInTheMicroBatchAndNeverInventsAWidth) {
  const HardwareProfile p = table_profile();
  const auto& block = spec_.blocks[1];
  const partition::BlockTimes at2 = p.measured.block_times(block, 1, 2, p.name);  // between 1 and 4
  EXPECT_NEAR(at2.forward_s, 3e-3, 1e-15);
  EXPECT_NEAR(at2.input_grad_s, 4e-3, 1e-15);
  const partition::BlockTimes at8 = p.measured.block_times(block, 1, 8, p.name);  // beyond 4: the line continues
  EXPECT_NEAR(at8.forward_s, 9e-3, 1e-15);
  EXPECT_NEAR(at8.weight_grad_s, 4e-3, 1e-15);
  try {
    p.measured.block_times(block, 2, 2, p.name);
    FAIL() << "tp 2 was never measured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no measurement of 'transformer_block d48 h4 ff192 T16' at tensor-parallel "
                                         "width 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("profile table"), std::string::npos) << e.what();
  }
}

TEST(AlphaBetaFit, FitRecoversALineAndSurvivesNoise) {
  const double alpha = 5e-6, bandwidth = 2e9;
  std::vector<std::pair<double, double>> points;
  for (double bytes : {4096.0, 65536.0, 1048576.0, 4194304.0}) points.push_back({bytes, alpha + bytes / bandwidth});
  const partition::AlphaBeta fit = partition::fit_alpha_beta(points, 4);
  EXPECT_EQ(fit.ranks, 4);
  EXPECT_NEAR(fit.latency_s, alpha, 1e-12);
  EXPECT_NEAR(fit.bandwidth_Bps, bandwidth, bandwidth * 1e-9);
  // Times that fall with size (noise) give a usable, positive line.
  const partition::AlphaBeta noisy = partition::fit_alpha_beta({{1000.0, 2e-3}, {2000.0, 1e-3}}, 2);
  EXPECT_GE(noisy.latency_s, 1e-7);
  EXPECT_GT(noisy.bandwidth_Bps, 0.0);
  EXPECT_THROW(partition::fit_alpha_beta({{1000.0, 1e-3}}, 2), Error);
}

TEST_F(MeasuredProfile, FileRoundTrips) {
  HardwareProfile p = table_profile();
  p.measured.ranks = 2;
  p.measured.threads_per_rank = 1;
  p.measured.p2p = partition::AlphaBeta{2, 7e-6, 3e9};
  p.measured.all_reduce = {partition::AlphaBeta{2, 1e-5, 4e9}};
  p.measured.reduce_scatter = {partition::AlphaBeta{2, 2e-5, 5e9}};
  p.measured.all_gather = {partition::AlphaBeta{2, 3e-5, 6e9}};
  p.measured.adamw_s_per_param = 2.5e-9;
  p.measured.sgd_s_per_param = 0.5e-9;
  p.measured.sgd_momentum_s_per_param = 1e-9;
  p.measured.grad_norm_s_per_param = 0.75e-9, p.measured.grad_clip_s_per_param = 0.25e-9;
  p.measured.cache_bytes_per_rank = 16 << 20;
  p.measured.sync_wait_per_compute = 0.375, p.measured.compute_stretch = 0.125, p.measured.stream_stretch = 1.25;
  p.measured.sync_wait_per_meeting_s = 31.25e-6;
  p.measured.count_exchange_s = 3.5e-6, p.measured.count_exchange_ranks = 2;
  p.measured.ep_exchange = {partition::AlphaBeta{2, 62.5e-6, 1.25e9}, partition::AlphaBeta{4, 125e-6, 0.5e9}};
  p.measured.blocks[1].warm_forward_s = 1.5e-3, p.measured.blocks[1].warm_input_grad_s = 2.5e-3;
  p.measured.blocks[1].warm_weight_grad_s = 0.25e-3;
  const std::string first = (dir_ / "p1.json").string(), second = (dir_ / "p2.json").string();
  std::ofstream(first) << profile_to_json(p).dump(2);
  const HardwareProfile loaded = load_profile(first);
  std::ofstream(second) << profile_to_json(loaded).dump(2);
  const HardwareProfile again = load_profile(second);
  for (const HardwareProfile* q : {&loaded, &again}) {
    ASSERT_EQ(q->measured.blocks.size(), p.measured.blocks.size());
    for (std::size_t i = 0; i < p.measured.blocks.size(); ++i) {
      EXPECT_EQ(q->measured.blocks[i].shape, p.measured.blocks[i].shape);
      EXPECT_EQ(q->measured.blocks[i].micro_batch, p.measured.blocks[i].micro_batch);
      EXPECT_NEAR(q->measured.blocks[i].forward_s, p.measured.blocks[i].forward_s, 1e-15);
    }
    ASSERT_TRUE(q->measured.p2p.has_value());
    EXPECT_NEAR(q->measured.p2p->latency_s, 7e-6, 1e-18);
    EXPECT_NEAR(q->measured.all_gather.at(0).bandwidth_Bps, 6e9, 1e-3);
    EXPECT_EQ(q->device_memory, p.device_memory);
    EXPECT_EQ(q->measured.ranks, 2);
    EXPECT_NEAR(q->measured.adamw_s_per_param, 2.5e-9, 1e-20);
    EXPECT_NEAR(q->measured.grad_norm_s_per_param, 0.75e-9, 1e-20);
    EXPECT_NEAR(q->measured.grad_clip_s_per_param, 0.25e-9, 1e-20);
    EXPECT_EQ(q->measured.cache_bytes_per_rank, 16 << 20);
    EXPECT_DOUBLE_EQ(q->measured.sync_wait_per_compute, 0.375);
    EXPECT_DOUBLE_EQ(q->measured.compute_stretch, 0.125);
    EXPECT_DOUBLE_EQ(q->measured.stream_stretch, 1.25);
    EXPECT_NEAR(q->measured.sync_wait_per_meeting_s, 31.25e-6, 1e-18);
    EXPECT_NEAR(q->measured.count_exchange_s, 3.5e-6, 1e-18);
    EXPECT_EQ(q->measured.count_exchange_ranks, 2);
    ASSERT_EQ(q->measured.ep_exchange.size(), 2u);
    ASSERT_NE(q->measured.ep_exchange_of(4), nullptr);
    EXPECT_EQ(q->measured.ep_exchange_of(8), nullptr);
    EXPECT_NEAR(q->measured.ep_exchange_of(2)->latency_s, 62.5e-6, 1e-18);
    EXPECT_NEAR(q->measured.ep_exchange_of(2)->bandwidth_Bps, 1.25e9, 1e-3);
    EXPECT_NEAR(q->measured.ep_exchange_of(4)->latency_s, 125e-6, 1e-18);
    EXPECT_NEAR(q->measured.ep_exchange_of(4)->bandwidth_Bps, 0.5e9, 1e-3);
    EXPECT_NEAR(q->measured.blocks[1].warm_input_grad_s, 2.5e-3, 1e-15);
    EXPECT_FALSE(q->measured.blocks[0].has_warm());
  }
  EXPECT_EQ(profile_to_json(loaded).dump(), profile_to_json(again).dump());
  // A profile written before the norm and the clip were timed loads with both at 0 (the update alone is priced).
  auto before = profile_to_json(p);
  before["measured"]["optimizer_ns_per_param"].erase("grad_norm");
  before["measured"]["optimizer_ns_per_param"].erase("grad_clip");
  before["measured"].erase("sync_wait_per_compute");  // and one from before the waits at meetings were timed
  before["measured"].erase("compute_stretch");
  before["measured"].erase("stream_stretch");
  before["measured"].erase("sync_wait_per_meeting_us");
  before["measured"].erase("count_exchange");
  before["measured"].erase("ep_exchange");  // and before the row exchange was timed (2026-12-01 (m))
  std::ofstream((dir_ / "before.json").string()) << before.dump();
  const HardwareProfile old = load_profile((dir_ / "before.json").string());
  EXPECT_NEAR(old.measured.adamw_s_per_param, 2.5e-9, 1e-20);
  EXPECT_EQ(old.measured.grad_norm_s_per_param, 0.0);
  EXPECT_EQ(old.measured.grad_clip_s_per_param, 0.0);
  EXPECT_EQ(old.measured.sync_wait_per_compute, 0.0);
  EXPECT_EQ(old.measured.compute_stretch, 0.0);
  EXPECT_EQ(old.measured.stream_stretch, 0.0);
  EXPECT_EQ(old.measured.sync_wait_per_meeting_s, 0.0);
  EXPECT_EQ(old.measured.count_exchange_s, 0.0);
  EXPECT_TRUE(old.measured.ep_exchange.empty());
  // A count exchange over fewer than 2 ranks is refused by name.
  auto lone = profile_to_json(p);
  lone["measured"]["count_exchange"]["ranks"] = 1;
  std::ofstream((dir_ / "lone.json").string()) << lone.dump();
  try {
    load_profile((dir_ / "lone.json").string());
    ADD_FAILURE() << "a count exchange over 1 rank loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("count_exchange"), std::string::npos) << e.what();
  }
  // A table entry measured twice is refused.
  auto text = profile_to_json(p);
  text["measured"]["blocks"].push_back(text["measured"]["blocks"][0]);
  std::ofstream((dir_ / "dup.json").string()) << text.dump();
  EXPECT_THROW(load_profile((dir_ / "dup.json").string()), Error);
  // A warm table comes whole: one warm time without the others is refused by name.
  auto partial = profile_to_json(p);
  partial["measured"]["blocks"][1].erase("warm_weight_grad_ms");
  std::ofstream((dir_ / "partial.json").string()) << partial.dump();
  try {
    load_profile((dir_ / "partial.json").string());
    FAIL() << "a block with two of its three warm times was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("warm_weight_grad_ms"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("blocks[1]"), std::string::npos) << e.what();
  }
}

// One spelling of each dtype ("f32", "bf16") is written; the old "fp32" of measured.dtype is read as f32. The device
// type and the collectives are enums with one name table: an unknown name is refused naming the key.
// The routed experts' fit (expert_rows) round-trips through the file (us and ns per row), is absent from older
// profiles (the FLOP share prices), is looked up by shape and tp, and a negative slope is refused by name. The fit
// itself: least squares through three points by hand, a falling line floored at slope 0 (intercept the mean).
TEST_F(MeasuredProfile, ExpertRowsRoundTripAndFit) {
  HardwareProfile p = table_profile();
  p.measured.expert_rows.push_back({"moe_block d32 h4 kv4 ff64 e8 k2 s0 T16", 1, {64, 128, 256},
                                    {39.5e-6, 39.25e-6, 42.5e-6}, {230e-9, 157.5e-9, 114.5e-9}});
  const std::string path = (dir_ / "rows.json").string();
  std::ofstream(path) << profile_to_json(p).dump(2);
  const HardwareProfile q = load_profile(path);
  ASSERT_EQ(q.measured.expert_rows.size(), 1u);
  const partition::MeasuredExpertRows* x = q.measured.expert_rows_of("moe_block d32 h4 kv4 ff64 e8 k2 s0 T16", 1);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(q.measured.expert_rows_of("moe_block d32 h4 kv4 ff64 e8 k2 s0 T16", 2), nullptr);
  EXPECT_EQ(x->rows, (std::vector<std::int64_t>{64, 128, 256}));
  EXPECT_NEAR(x->intercept.input_grad_s, 39.25e-6, 1e-18);
  EXPECT_NEAR(x->per_row.forward_s, 230e-9, 1e-20);
  EXPECT_NEAR(x->per_row.weight_grad_s, 114.5e-9, 1e-20);
  EXPECT_EQ(profile_to_json(q)["measured"]["expert_rows"].dump(), profile_to_json(p)["measured"]["expert_rows"].dump());
  auto old = profile_to_json(p);
  old["measured"].erase("expert_rows");
  std::ofstream((dir_ / "old.json").string()) << old.dump();
  EXPECT_TRUE(load_profile((dir_ / "old.json").string()).measured.expert_rows.empty());
  auto bad = profile_to_json(p);
  bad["measured"]["expert_rows"][0]["input_grad_ns_per_row"] = -1;
  std::ofstream((dir_ / "bad.json").string()) << bad.dump();
  try {
    load_profile((dir_ / "bad.json").string());
    ADD_FAILURE() << "a negative cost per row loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input_grad_ns_per_row"), std::string::npos) << e.what();
  }
  // y = 2 + 3x at x 1, 2, 4 (exact), and a falling line: slope 0, intercept the mean.
  const auto [a, b] = fit_intercept_slope({1, 2, 4}, {5, 8, 14});
  EXPECT_NEAR(a, 2.0, 1e-12);
  EXPECT_NEAR(b, 3.0, 1e-12);
  const auto [a0, b0] = fit_intercept_slope({1, 2, 4}, {6, 4, 2});
  EXPECT_EQ(b0, 0.0);
  EXPECT_NEAR(a0, 4.0, 1e-12);
  // A steep line whose intercept comes out negative (y = -1 + 2x): through the origin, b = (1 + 6 + 28) / 21.
  const auto [an, bn] = fit_intercept_slope({1, 2, 4}, {1, 3, 7});
  EXPECT_EQ(an, 0.0);
  EXPECT_NEAR(bn, 35.0 / 21.0, 1e-12);
  // fit_passes: per pass, each level's upper median (of 3 runs the middle one, of 2 the higher: a time some run took),
  // then the fit above. Pass 0's medians are 5, 8, 14 (y = 2 + 3x); pass 1's 6, 4, 2 (slope 0, the mean).
  const std::vector<std::vector<std::vector<double>>> times = {{{9, 5, 1}, {8, 7}, {14, 20, 2}},
                                                               {{6, 1, 7}, {4, 3}, {2, 2, 2}}};
  const auto fits = fit_passes({1, 2, 4}, times);
  ASSERT_EQ(fits.size(), 2u);
  EXPECT_NEAR(fits[0].first, 2.0, 1e-12);
  EXPECT_NEAR(fits[0].second, 3.0, 1e-12);
  EXPECT_NEAR(fits[1].first, 4.0, 1e-12);
  EXPECT_EQ(fits[1].second, 0.0);
}

// The host routing's fit (host_routing) and a moe block's routed rows per expert round-trip through the file, are
// absent from older profiles, and a negative slope is refused by name; a fit of another expert count is the widest one.
TEST_F(MeasuredProfile, HostRoutingAndRoutedRowsRoundTrip) {
  HardwareProfile p = table_profile();
  p.measured.host_routing.push_back({8, 2, {16, 32, 64}, {3e-6, 5e-6, 0.0}, {40e-9, 90e-9, 0.0}});
  p.measured.host_routing.push_back({64, 8, {16, 32, 64}, {4e-6, 6e-6, 0.0}, {300e-9, 700e-9, 0.0}});
  p.measured.blocks.front().routed_rows = {3, 0, 5, 8};
  const std::string path = (dir_ / "routing.json").string();
  std::ofstream(path) << profile_to_json(p).dump(2);
  const HardwareProfile q = load_profile(path);
  ASSERT_EQ(q.measured.host_routing.size(), 2u);
  const partition::MeasuredHostRouting* x = q.measured.host_routing_of(8, 2);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->tokens, (std::vector<std::int64_t>{16, 32, 64}));
  EXPECT_NEAR(x->intercept.input_grad_s, 5e-6, 1e-18);
  EXPECT_NEAR(x->per_token.forward_s, 40e-9, 1e-20);
  EXPECT_EQ(q.measured.host_routing_of(128, 8)->experts, 64);  // not timed: the widest
  EXPECT_EQ(q.measured.blocks.front().routed_rows, (std::vector<std::int64_t>{3, 0, 5, 8}));
  EXPECT_TRUE(q.measured.blocks.back().routed_rows.empty());
  EXPECT_EQ(profile_to_json(q)["measured"].dump(), profile_to_json(p)["measured"].dump());
  auto old = profile_to_json(p);
  old["measured"].erase("host_routing");
  old["measured"]["blocks"][0].erase("routed_rows");
  std::ofstream((dir_ / "old.json").string()) << old.dump();
  const HardwareProfile o = load_profile((dir_ / "old.json").string());
  EXPECT_TRUE(o.measured.host_routing.empty());
  EXPECT_EQ(o.measured.host_routing_of(8, 2), nullptr);
  EXPECT_TRUE(o.measured.blocks.front().routed_rows.empty());
  auto bad = profile_to_json(p);
  bad["measured"]["host_routing"][1]["input_grad_ns_per_token"] = -1;
  std::ofstream((dir_ / "bad.json").string()) << bad.dump();
  try {
    load_profile((dir_ / "bad.json").string());
    ADD_FAILURE() << "a negative routing cost per token loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host_routing[1]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("input_grad_ns_per_token"), std::string::npos) << e.what();
  }
}

// The row exchange's sizes (measure_ep_exchange): the routed rows of a micro-batch of the moe block with the most
// bytes, b · T · k rows of D values at the largest requested micro-batch, half and twice them; none for a dense model.
TEST_F(MeasuredProfile, TimesTheRowExchangeAtTheModelsRoutedRows) {
  const std::string config = (dir_ / "moe.json").string();
  std::ofstream(config) << R"({"model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4,
    "seq_len": 16, "ffn_hidden_size": 32, "n_experts": 8, "top_k": 2}, "batch": {"global_batch_size": 4},
    "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  const partition::ModelSpec spec = run_plan::model_spec(config::load_config(config, {}).model);
  const std::vector<EpExchangeSize> sizes = ep_exchange_sizes(spec, {1, 4, 2}, 4);
  ASSERT_EQ(sizes.size(), 3u);
  const std::int64_t rows[] = {64, 128, 256};  // 4 x T 16 x k 2 = 128, half and twice
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sizes[i].rows, rows[i]) << i;
    EXPECT_EQ(sizes[i].width, 32) << i;
    EXPECT_EQ(sizes[i].bytes(), static_cast<double>(rows[i] * 32 * 4)) << i;
  }
  EXPECT_EQ(ep_exchange_sizes(spec, {2}, 2)[1].bytes(), 2.0 * 16 * 2 * 32 * 2);  // bf16: 2 B a value
  const std::string dense = (dir_ / "dense.json").string();
  std::ofstream(dense) << R"({"model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 1, "n_heads": 4,
    "seq_len": 16}, "batch": {"global_batch_size": 4}, "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  EXPECT_TRUE(ep_exchange_sizes(run_plan::model_spec(config::load_config(dense, {}).model), {4}, 4).empty());
}

// `cleave profile` times a moe block on distinct random tokens: its fresh router spreads them over more than k of
// the E experts (identical tokens sent all b·T·k rows to k experts), every routed row counted once; the host's
// routing is timed per (E, k) with a positive per-token cost in both passes that route.
TEST_F(MeasuredProfile, MoeBlocksAreTimedOnDistinctTokens) {
  const std::string config = (dir_ / "moe.json").string();
  std::ofstream(config) << R"({"model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 1, "n_heads": 4,
    "seq_len": 16, "ffn_hidden_size": 32, "n_experts": 8, "top_k": 2}, "batch": {"global_batch_size": 4},
    "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  const partition::ModelSpec spec = run_plan::model_spec(config::load_config(config, {}).model);
  partition::MeasuredCosts costs;
  BlockProfileRequest request;
  request.micro_batches = {2};
  request.repeats = 1;
  request.rounds = 1;
  request.cold_caches = false;
  measure_blocks(costs, spec, request, nullptr);
  int moe_blocks = 0;
  for (const auto& b : costs.blocks) {
    if (b.routed_rows.empty()) continue;
    ++moe_blocks;
    ASSERT_EQ(b.routed_rows.size(), 8u) << b.shape;
    std::int64_t rows = 0, with_rows = 0;
    for (std::int64_t r : b.routed_rows) rows += r, with_rows += r > 0 ? 1 : 0;
    EXPECT_EQ(rows, 2 * 16 * 2) << b.shape;  // micro-batch x T x k
    EXPECT_GT(with_rows, 2) << b.shape;      // more than k experts hold rows
  }
  EXPECT_EQ(moe_blocks, 1);
  measure_host_routing(costs, spec, request, nullptr);
  ASSERT_EQ(costs.host_routing.size(), 1u);
  const partition::MeasuredHostRouting& h = costs.host_routing.front();
  EXPECT_EQ(h.experts, 8);
  EXPECT_EQ(h.top_k, 2);
  EXPECT_EQ(h.tokens, (std::vector<std::int64_t>{32, 64, 128}));
  EXPECT_GT(h.intercept.forward_s + h.per_token.forward_s * 128, 0.0);
  EXPECT_GT(h.intercept.input_grad_s + h.per_token.input_grad_s * 128, 0.0);
  // Distinct inputs draw from a fixed seed: two draws are the same values, and not all one value.
  const Tensor a = random_input(Shape{2, 16}, DType::kI32, 64), b = random_input(Shape{2, 16}, DType::kI32, 64);
  std::set<std::int32_t> ids(a.data<std::int32_t>(), a.data<std::int32_t>() + 32);
  EXPECT_GT(ids.size(), 8u);
  EXPECT_TRUE(std::equal(a.data<std::int32_t>(), a.data<std::int32_t>() + 32, b.data<std::int32_t>()));
  EXPECT_LT(*ids.rbegin(), 64);
  EXPECT_GE(*ids.begin(), 0);
}

TEST_F(MeasuredProfile, OneDtypeSpellingWrittenTheOldOneRead) {
  HardwareProfile p = table_profile();
  p.device_type = DeviceType::kCuda;
  p.measured.all_reduce = {partition::AlphaBeta{2, 1e-5, 4e9}};
  const nlohmann::json written = profile_to_json(p);
  EXPECT_EQ(written["measured"]["dtype"], "f32");
  EXPECT_EQ(written["device_type"], "cuda");
  ASSERT_TRUE(written["measured"].contains("all_reduce"));
  const auto load = [&](const nlohmann::json& j) {
    const std::string path = (dir_ / "dtype.json").string();
    std::ofstream(path) << j.dump();
    return load_profile(path);
  };
  nlohmann::json old = written;
  old["measured"]["dtype"] = "fp32";  // what `cleave profile` wrote before
  const HardwareProfile read = load(old);
  EXPECT_EQ(read.measured.dtype, DType::kF32);
  EXPECT_EQ(read.device_type, DeviceType::kCuda);
  ASSERT_NE(read.measured.collective(partition::Collective::kAllReduce, 2), nullptr);
  EXPECT_EQ(read.measured.collective(partition::Collective::kAllGather, 2), nullptr);
  EXPECT_EQ(profile_to_json(read)["measured"]["dtype"], "f32");
  nlohmann::json bf16 = written;
  bf16["measured"]["dtype"] = "bf16";
  EXPECT_EQ(load(bf16).measured.dtype, DType::kBF16);
  const auto refused = [&](const nlohmann::json& j) -> std::string {
    try {
      load(j);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  nlohmann::json f16 = written;
  f16["measured"]["dtype"] = "f16";
  EXPECT_NE(refused(f16).find("measured: 'dtype' must be \"f32\" or \"bf16\", got \"f16\""), std::string::npos)
      << refused(f16);
  nlohmann::json gpu = written;
  gpu["device_type"] = "gpu";
  EXPECT_NE(refused(gpu).find("'device_type' must be one of \"cpu\", \"cuda\", got \"gpu\""), std::string::npos)
      << refused(gpu);
}

TEST_F(MeasuredProfile, PlannerTimesAStepFromTheTable) {
  const HardwareProfile p = table_profile();
  PlanChoice c;
  c.micro_batch = 2;
  c.global_batch = 8;  // 4 micro-batches on one rank
  const PlanEstimate e = estimate_plan(config_, {}, c, p, SearchOptions{1, 0});
  ASSERT_TRUE(e.valid) << e.reason;
  // By hand: 8 blocks x (F 3 ms + I 4 ms + W 1 ms) x 4 micro-batches = 256 ms; nothing else costs time.
  EXPECT_NEAR(e.step_s, 0.256, 1e-9);
  // Full recomputation reruns each transformer block's forward inside I: + 4 blocks x 3 ms x 4.
  c.recompute = partition::Recompute::kFull;
  const PlanEstimate full = estimate_plan(config_, {}, c, p, SearchOptions{1, 0});
  ASSERT_TRUE(full.valid) << full.reason;
  EXPECT_NEAR(full.step_s, 0.256 + 4 * 3e-3 * 4, 1e-6);
  // A plan at an unmeasured tp width is refused with the reason; the search still ranks the others.
  PlanChoice tp2 = c;
  tp2.tp = 2;
  tp2.recompute = partition::Recompute::kNone;
  const PlanEstimate e2 = estimate_plan(config_, {}, tp2, p, SearchOptions{2, 0});
  EXPECT_FALSE(e2.valid);
  EXPECT_NE(e2.reason.find("no measurement at tensor-parallel width 2"), std::string::npos) << e2.reason;
  EXPECT_FALSE(search_plans(config_, {}, p, SearchOptions{2, 0}).ranked.empty());
}

// Cold and warm tables: a plan takes from each by how much of its rank's working set fits the rank's cache.
TEST_F(MeasuredProfile, WarmTableCountsByTheShareOfTheWorkingSetInCache) {
  HardwareProfile p = table_profile();
  for (auto& b : p.measured.blocks) {  // warm = half the cold time
    b.warm_forward_s = b.forward_s / 2, b.warm_input_grad_s = b.input_grad_s / 2;
    b.warm_weight_grad_s = b.weight_grad_s / 2;
  }
  const partition::BlockSpec& block = spec_.blocks[1];
  const auto cold = p.measured.block_times(block, 1, 2, "t", 0.0);
  const auto warm = p.measured.block_times(block, 1, 2, "t", 1.0);
  const auto half = p.measured.block_times(block, 1, 2, "t", 0.5);
  EXPECT_NEAR(cold.forward_s, 3e-3, 1e-12);  // 1 ms + 1 ms x 2 (interpolated between m1 and m4)
  EXPECT_NEAR(warm.forward_s, cold.forward_s / 2, 1e-12);
  EXPECT_NEAR(half.input_grad_s, 0.75 * cold.input_grad_s, 1e-12);
  // The share: the cache over the working set, at most 1; nothing where the cache is unknown.
  EXPECT_EQ(p.measured.warm_fraction(1000), 0.0);
  p.measured.cache_bytes_per_rank = 1000;
  EXPECT_EQ(p.measured.warm_fraction(800), 1.0);
  EXPECT_EQ(p.measured.warm_fraction(4000), 0.25);
  // The planner: a cache larger than any working set gives the warm step (half of 256 ms, by hand as in
  // PlannerTimesAStepFromTheTable), a tiny one nearly the cold step.
  PlanChoice c;
  c.micro_batch = 2;
  c.global_batch = 8;
  p.measured.cache_bytes_per_rank = 1LL << 40;
  EXPECT_NEAR(estimate_plan(config_, {}, c, p, SearchOptions{1, 0}).step_s, 0.128, 1e-9);
  p.measured.cache_bytes_per_rank = 1;
  EXPECT_NEAR(estimate_plan(config_, {}, c, p, SearchOptions{1, 0}).step_s, 0.256, 1e-6);
  // Without a warm table the cache changes nothing.
  const HardwareProfile cold_only = table_profile();
  HardwareProfile big_cache = cold_only;
  big_cache.measured.cache_bytes_per_rank = 1LL << 40;
  EXPECT_NEAR(estimate_plan(config_, {}, c, big_cache, SearchOptions{1, 0}).step_s, 0.256, 1e-9);
}

TEST(CacheShare, EachRankGetsTheCacheOverTheRanksSharingIt) {
  const CacheInfo l3{32 << 20, 2};  // this project's machine: 32 MiB shared by 2 CPUs
  EXPECT_EQ(cache_bytes_per_rank(l3, 2, 1), 16 << 20);
  EXPECT_EQ(cache_bytes_per_rank(l3, 1, 1), 32 << 20);  // one rank alone keeps all of it
  EXPECT_EQ(cache_bytes_per_rank(l3, 1, 2), 32 << 20);  // one rank of 2 threads on both CPUs
  EXPECT_EQ(cache_bytes_per_rank(CacheInfo{32 << 20, 8}, 16, 2), 8 << 20);  // 4 ranks of 2 threads share each
  EXPECT_EQ(cache_bytes_per_rank(CacheInfo{}, 2, 1), 0);
  const CacheInfo here = last_level_cache();  // whatever this machine has, it is a size and a CPU count
  EXPECT_GE(here.bytes, 0);
  EXPECT_GE(here.shared_by_cpus, 1);
}

TEST_F(MeasuredProfile, DataParallelReductionUsesTheMeasuredCollective) {
  HardwareProfile p = table_profile();
  p.measured.all_reduce = {partition::AlphaBeta{2, 1e-3, 1e6}};  // slow enough to see
  PlanChoice c;
  c.dp = 2;
  c.micro_batch = 2;
  c.global_batch = 8;
  const PlanEstimate e = estimate_plan(config_, {}, c, p, SearchOptions{2, 0});
  ASSERT_TRUE(e.valid) << e.reason;
  double grad_bytes = 0;
  for (const auto& cost : partition::model_costs(spec_, DType::kF32, partition::Recompute::kNone)) {
    grad_bytes += 4.0 * static_cast<double>(cost.param_count);
  }
  EXPECT_NEAR(e.breakdown.dp_comm_s, 1e-3 + grad_bytes / 1e6, 1e-9);
}

TEST_F(MeasuredProfile, AProfileOfAnotherModelIsRefusedByName) {
  const HardwareProfile p = table_profile();
  partition::GptConfig other;
  other.d_model = 64;
  other.vocab_size = 64;
  other.seq_len = 16;
  try {
    check_profile_matches(p, partition::make_gpt_spec(other), false);
    FAIL() << "another model's profile was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("measured for another model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("transformer_block d64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_profile_matches(p, spec_, /*bf16=*/true), Error);  // timed in fp32
  EXPECT_NO_THROW(check_profile_matches(p, spec_, false));
}

TEST_F(MeasuredProfile, MeasurementTimesEveryBlockAtEachWidth) {
  partition::MeasuredCosts costs;
  BlockProfileRequest request;
  request.tp_widths = {1, 2};
  request.micro_batches = {1, 3};
  request.repeats = 2;
  request.rounds = 3;
  measure_blocks(costs, spec_, request, nullptr);
  // Distinct shapes: embedding, transformer block, final layernorm, tied head, loss = 5, x 2 widths x 2 sizes,
  // each once however many rounds measured it.
  ASSERT_EQ(costs.blocks.size(), 5u * 2 * 2);
  for (const auto& b : costs.blocks) {
    EXPECT_GT(b.forward_s, 0.0) << b.shape << " tp" << b.tp << " m" << b.micro_batch;
    if (b.shape.starts_with("transformer_block")) {
      EXPECT_GT(b.input_grad_s, 0.0) << b.shape;
      EXPECT_GT(b.weight_grad_s, 0.0) << b.shape;
    }
  }
  for (const auto& block : spec_.blocks) {
    EXPECT_TRUE(costs.covers(partition::block_shape_key(block), 1));
    EXPECT_TRUE(costs.covers(partition::block_shape_key(block), 2));
  }
  // Cold caches (the default) also time each pass warm, right after; warm only (--warm-caches) has one table.
  for (const auto& b : costs.blocks) {
    EXPECT_TRUE(b.has_warm()) << b.shape << " m" << b.micro_batch;
    if (b.shape.starts_with("transformer_block")) {
      EXPECT_GT(b.warm_weight_grad_s, 0.0) << b.shape;
    }
  }
  partition::MeasuredCosts warm;
  request.cold_caches = false;
  measure_blocks(warm, spec_, request, nullptr);
  ASSERT_EQ(warm.blocks.size(), costs.blocks.size());
  for (const auto& b : warm.blocks) EXPECT_FALSE(b.has_warm()) << b.shape;
  request.rounds = 0;
  EXPECT_THROW(measure_blocks(costs, spec_, request, nullptr), Error);
  EXPECT_THROW(measure_optimizer(costs, 64, 1, 0, nullptr), Error);
  // The optimizer step as the trainer runs it: the update, the exact norm and the clip's scale, each timed.
  partition::MeasuredCosts optimizer;
  measure_optimizer(optimizer, 4096 + 3, 1, 1, nullptr);
  for (double rate : {optimizer.adamw_s_per_param, optimizer.sgd_s_per_param, optimizer.sgd_momentum_s_per_param,
                      optimizer.grad_norm_s_per_param, optimizer.grad_clip_s_per_param}) {
    EXPECT_GT(rate, 0.0);
  }
}

}  // namespace
}  // namespace cleave::planner::measured_costs_test
