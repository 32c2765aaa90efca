// A profile's `sources` (profiles/README.md): the shipped GPU profiles cite every number the cost model reads, the
// reader refuses a sources object that misses a number or names one the profile does not have, and the citations
// survive a write and a read; the curves are held against published measurements they were not built from
// (profiles/checks/).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "partition/hardware_profile.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::partition::profile_sources_test {
namespace {

namespace fs = std::filesystem;

class ProfileSources : public testing::ScratchDirTest {
 protected:
  ProfileSources() : ScratchDirTest("cleave_profile_sources_test_") {}

  // The error load_profile throws for `j`, or "" when it loads.
  std::string refusal(const nlohmann::json& j) {
    try {
      load_profile(write("p.json", j.dump()));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

nlohmann::json shipped(const std::string& name) {
  std::ifstream in(std::string(CLEAVE_SOURCE_DIR) + "/profiles/" + name);
  return nlohmann::json::parse(in);
}

TEST_F(ProfileSources, ShippedGpuProfilesCiteEveryNumberTheModelReads) {
  for (const char* name : {"a100_80gb_sxm.json", "h100_sxm.json"}) {
    const HardwareProfile p = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/" + name);
    const auto keys = p.sourced_keys();
    ASSERT_EQ(p.sources.size(), keys.size()) << name;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(p.sources[i].first, keys[i]) << name;
      EXPECT_FALSE(p.sources[i].second.empty()) << name << " " << keys[i];
    }
    // Links, collectives and the GEMM curve are all among them.
    for (const char* k : {"intra_node.bandwidth_GBps", "inter_node.latency_us", "gemm_efficiency", "peak_tflops.bf16",
                          "attention_efficiency"}) {
      EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << name << " " << k;
    }
    // Written back with its citations, read again to the same profile.
    const nlohmann::json out = profile_to_json(p);
    ASSERT_TRUE(out.contains("sources")) << name;
    EXPECT_EQ(profile_to_json(load_profile(write("again.json", out.dump()))), out) << name;
  }
}

// attention_efficiency caps the fused attention kernel's products and nothing else; a value above 1 is refused.
TEST_F(ProfileSources, AttentionEfficiencyCapsOnlyTheFusedAttentionProducts) {
  HardwareProfile p = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  p.sm_count = 0;  // the curve alone: wave quantization has its test below
  ASSERT_GT(p.attention_efficiency, 0.0);
  const Gemm big{16384, 16384, 8192, 1};  // 2^42 FLOPs: the curve's top point, above the cap
  ASSERT_LT(p.attention_efficiency, p.gemm_efficiency_at(big.flops()));
  Gemm fused = big;
  fused.fused_attention = true;
  PassWork plain_pass, fused_pass;
  plain_pass.gemms = {big};
  fused_pass.gemms = {fused};
  const double peak = p.peak_flops_bf16;
  EXPECT_DOUBLE_EQ(p.roofline_seconds(plain_pass, true), big.flops() / (peak * p.gemm_efficiency_at(big.flops())));
  EXPECT_DOUBLE_EQ(p.roofline_seconds(fused_pass, true), big.flops() / (peak * p.attention_efficiency));
  // A small product below the cap keeps the curve's (lower) efficiency.
  Gemm small{64, 64, 64, 1, true};
  PassWork small_pass;
  small_pass.gemms = {small};
  const double curve = p.gemm_efficiency_at(small.flops());
  ASSERT_LT(curve, p.attention_efficiency);
  EXPECT_DOUBLE_EQ(p.roofline_seconds(small_pass, true),
                   std::max(small.flops() / (peak * curve), small.traffic_bytes(2.0) / p.memory_bandwidth_Bps));
  // The fused products read and write their operands but not the [T, T] one (here the largest, m x n).
  EXPECT_DOUBLE_EQ(fused.traffic_bytes(2.0), (16384.0 * 8192 * 2) * 2);
  EXPECT_DOUBLE_EQ(big.traffic_bytes(2.0), (16384.0 * 8192 * 2 + 16384.0 * 16384) * 2);
  EXPECT_DOUBLE_EQ(fused.operand_bytes(2.0), big.operand_bytes(2.0));  // the memory plan's workspace is unchanged
  // Without the key, the curve alone.
  p.attention_efficiency = 0;
  EXPECT_DOUBLE_EQ(p.roofline_seconds(fused_pass, true), p.roofline_seconds(plain_pass, true));  // compute-bound
  nlohmann::json j = shipped("a100_80gb_sxm.json");
  j["attention_efficiency"] = 1.5;
  EXPECT_NE(refusal(j).find("'attention_efficiency' 1.5 is a fraction of the peak"), std::string::npos) << refusal(j);
}

// Tile and wave quantization (sm_count, gemm_tiles): a GEMM runs in ceil(tiles / SMs) waves of one tile per SM, each
// at the curve's top efficiency; a tile count one past a wave multiple costs a full extra wave, and the library's
// best tile is taken. The fused attention kernel's products are not library GEMMs: no wave term.
TEST_F(ProfileSources, WaveQuantizationChargesAFullWaveForOneTileOver) {
  HardwareProfile p = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  ASSERT_EQ(p.sm_count, 108);
  p.gemm_tiles = {{256, 128}};
  double top = 0;  // the curve's highest point (not its last: the A100's top is at 2^42 FLOPs)
  for (const auto& point : p.gemm_efficiency) top = std::max(top, point.second);
  const double k = 8192;
  const double wave = 2.0 * 256 * 128 * k * 108 / (p.peak_flops_bf16 * top);  // one wave: 108 tiles of 256 x 128
  const Gemm full{256.0 * 108, 128, k, 1};       // 108 tiles: one full wave
  const Gemm one_over{256.0 * 108 + 1, 128, k, 1};  // 109 tiles: a second wave of one tile
  const Gemm batched{256.0 * 54, 128, k, 2};     // 2 x 54 tiles: one wave
  EXPECT_DOUBLE_EQ(p.gemm_wave_seconds(full, true), wave);
  EXPECT_DOUBLE_EQ(p.gemm_wave_seconds(one_over, true), 2 * wave);
  EXPECT_DOUBLE_EQ(p.gemm_wave_seconds(batched, true), wave);
  EXPECT_NEAR(wave, full.flops() / (p.peak_flops_bf16 * top), 1e-12 * wave);  // a full wave loses nothing
  PassWork pass;
  pass.gemms = {one_over};
  EXPECT_DOUBLE_EQ(p.roofline_seconds(pass, true), 2 * wave);  // the wave term, not the curve, prices it
  // With 128 x 128 tiles on offer: 217 tiles, 3 waves of half the work each (1.5 waves' time), beats 2 full waves.
  p.gemm_tiles = {{256, 128}, {128, 128}};
  EXPECT_DOUBLE_EQ(p.gemm_wave_seconds(one_over, true), 1.5 * wave);
  Gemm fused = one_over;
  fused.fused_attention = true;
  EXPECT_EQ(p.gemm_wave_seconds(fused, true), 0.0);
  p.sm_count = 0;
  EXPECT_EQ(p.gemm_wave_seconds(one_over, true), 0.0);
  // The keys come together, on a roofline profile; a bad tile is refused by name.
  nlohmann::json j = shipped("a100_80gb_sxm.json");
  nlohmann::json lone = j;
  lone.erase("gemm_tiles");
  EXPECT_NE(refusal(lone).find("'sm_count' and 'gemm_tiles' come together"), std::string::npos) << refusal(lone);
  j["gemm_tiles"] = nlohmann::json::array({nlohmann::json::array({256, 0})});
  EXPECT_NE(refusal(j).find("'gemm_tiles' entry [256,0]"), std::string::npos) << refusal(j);
}

// The A100's GEMM size curve is Vidur's published per-operator timings of transformer linear layers (profile sources;
// benchmarks/planner/vidur_gemm_curve.py): the median fraction of peak of the compute-bound GEMMs in bins a factor 8
// wide, a point at each bin's centre, with NVIDIA's 512-cube square below them. Checked by hand: the points, and one
// of the GEMMs behind them priced between two points, against its time in Vidur's table.
TEST_F(ProfileSources, A100GemmCurveIsTheMedianOfVidursTransformerGemmsByFlops) {
  const HardwareProfile p = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/a100_80gb_sxm.json");
  const std::vector<std::pair<double, double>> points = {
      {268435456.0, 0.09},         // 512^3, NVIDIA's CUDA 11 figure
      {1073741824.0, 0.374},       // 2^30: 203 GEMMs
      {8589934592.0, 0.580},       // 2^33: 5,441
      {68719476736.0, 0.678},      // 2^36: 15,288
      {549755813888.0, 0.713},     // 2^39: 10,076
      {4398046511104.0, 0.747},    // 2^42: 2,132 (the top: a full wave's rate in the wave term)
      {35184372088832.0, 0.733}};  // 2^45: 143 (Llama 3 70B only)
  ASSERT_EQ(p.gemm_efficiency.size(), points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    EXPECT_DOUBLE_EQ(p.gemm_efficiency[i].first, points[i].first) << i;
    EXPECT_DOUBLE_EQ(p.gemm_efficiency[i].second, points[i].second) << i;
    EXPECT_DOUBLE_EQ(p.gemm_efficiency_at(points[i].first), points[i].second) << i;
  }
  // Llama 3 8B's gated up-projection at tp 1 and 4096 tokens: 4096 x 28672 x 4096, 9.62e11 FLOPs, between 2^39 and
  // 2^42: x = ln(9.62e11 / 2^39) / ln 8 = ln 1.75 / ln 8 = 0.26912, efficiency 0.713 + 0.26912 x 0.034 = 0.72215,
  // 9.62e11 / (312e12 x 0.72215) = 4.2699 ms. Its wave term is lower: 128 x 128 tiles, 32 x 224 = 7168 tiles,
  // 67 waves of 2 x 128 x 128 x 4096 x 108 / (312e12 x 0.747) = 62.20 us = 4.167 ms. Vidur measured 4.13-4.14 ms
  // (time_stats.mlp_up_proj.median): the price is 3% above it.
  const Gemm up{4096, 28672, 4096, 1};
  const double x = std::log(1.75) / std::log(8.0);
  EXPECT_NEAR(x, 0.26912, 1e-5);
  EXPECT_NEAR(p.gemm_efficiency_at(up.flops()), 0.713 + x * (0.747 - 0.713), 1e-12);
  EXPECT_NEAR(p.gemm_wave_seconds(up, true), 67 * 2.0 * 128 * 128 * 4096 * 108 / (312e12 * 0.747), 1e-12);
  PassWork pass;
  pass.gemms = {up};
  EXPECT_NEAR(p.roofline_seconds(pass, true), 4.2699e-3, 1e-7);
  EXPECT_NEAR(p.roofline_seconds(pass, true) / 4.13e-3, 1.034, 0.001);
}

// The H100's GEMM size curve follows the A100's rule on Vidur's H100 tables (the same script with --gpu h100
// --peak-tflops 989 --bandwidth-GBps 2970: ridge 333 FLOP/B, so no compute-bound GEMM in the 2^30 bin and, at most
// 4096 tokens, none in the 2^45 one), with XLA's sm_90 squares below Vidur's range. Checked by hand: the points, and
// the A100 check's analogue, Llama-2 7B's gated up-projection, priced against its time in Vidur's table. XLA's
// per-shape grid no longer prices anything (profiles/checks/h100_sxm_xla_gemm_table.json keeps it as evidence).
TEST_F(ProfileSources, H100GemmCurveIsTheMedianOfVidursTransformerGemmsByFlops) {
  const HardwareProfile p = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json");
  EXPECT_TRUE(p.gemm_shape_efficiency.empty());
  const std::vector<std::pair<double, double>> points = {
      {33554432.0, 0.0065},       // 256^3, XLA's sm_90 square
      {268435456.0, 0.0412},      // 512^3, XLA
      {2147483648.0, 0.2389},     // 1024^3, XLA
      {8589934592.0, 0.469},      // 2^33: 2,349 GEMMs
      {68719476736.0, 0.630},     // 2^36: 9,693
      {549755813888.0, 0.694},    // 2^39: 5,090
      {4398046511104.0, 0.698}};  // 2^42: 306 (the top: a full wave's rate in the wave term)
  ASSERT_EQ(p.gemm_efficiency.size(), points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    EXPECT_DOUBLE_EQ(p.gemm_efficiency[i].first, points[i].first) << i;
    EXPECT_DOUBLE_EQ(p.gemm_efficiency[i].second, points[i].second) << i;
    EXPECT_DOUBLE_EQ(p.gemm_efficiency_at(points[i].first), points[i].second) << i;
  }
  // Llama-2 7B's gated up-projection at tp 1 and 4096 tokens: 4096 x 22016 x 4096, 7.387e11 FLOPs, between 2^39 and
  // 2^42: x = ln(7.387e11 / 2^39) / ln 8 = 0.14209, efficiency 0.694 + 0.14209 x 0.004 = 0.69457, 1.0754 ms. The
  // wave term is higher: 256 x 128 tiles, 16 x 172 = 2752 tiles, 21 waves of 132 (2772 slots) of
  // 2 x 256 x 128 x 4096 x 132 / (989e12 x 0.698) = 51.33 us = 1.0779 ms. Vidur measured 0.987-0.999 ms
  // (time_stats.mlp_up_proj.median): the price is 8-9% above it.
  const Gemm up{4096, 22016, 4096, 1};
  const double x = std::log(up.flops() / 549755813888.0) / std::log(8.0);
  EXPECT_NEAR(x, 0.14209, 1e-5);
  EXPECT_NEAR(p.gemm_efficiency_at(up.flops()), 0.694 + x * (0.698 - 0.694), 1e-12);
  const double wave = 21 * 2.0 * 256 * 128 * 4096 * 132 / (989e12 * 0.698);
  EXPECT_NEAR(p.gemm_wave_seconds(up, true), wave, 1e-12);
  PassWork pass;
  pass.gemms = {up};
  EXPECT_NEAR(p.roofline_seconds(pass, true), 1.0779e-3, 1e-7);
  EXPECT_NEAR(p.roofline_seconds(pass, true) / 0.993e-3, 1.086, 0.001);
  // 4096^3, the one shape Vidur, XLA's table and the published torch.mm stream all measure: the curve between 2^36
  // and 2^39 (x = 1/3) prices it at 0.6513 of peak, below Vidur's own 0.713-0.720 there and XLA's 0.792.
  const Gemm square{4096, 4096, 4096, 1};
  EXPECT_NEAR(p.gemm_efficiency_at(square.flops()), 0.630 + (0.694 - 0.630) / 3, 1e-12);
}

// One published benchmark timed bf16 8192^3 on both GPUs the same way, every round published
// (profiles/checks/gemm_8192_rounds.json). The H100's rounds fall from 0.815 of peak to a median 0.719 (the 700 W
// limit within seconds; the first round is the short streams' burst rate), the A100's hold at 0.93; each shipped
// curve's price is recomputed here (a change to either curve must revisit the file), and the measured median over
// that price is pinned: 1.063 on the H100, 1.280 on the A100 (whose curve prices the SC'21 and zero-bubble rows within
// 5%). Evidence only: nothing in the file is read by the cost model.
TEST_F(ProfileSources, GemmCurvesAgainstPublishedRoundsAt8192Cubed) {
  const std::string path = std::string(CLEAVE_SOURCE_DIR) + "/profiles/checks/gemm_8192_rounds.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json checks = nlohmann::json::parse(in);
  const Gemm g{checks.at("m").get<double>(), checks.at("n").get<double>(), checks.at("k").get<double>(), 1};
  ASSERT_EQ(g.m, 8192.0);
  ASSERT_EQ(checks.at("gpus").size(), 2U);
  for (const auto& gpu : checks.at("gpus")) {
    const std::string name = gpu.at("profile").get<std::string>();
    const HardwareProfile p = load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/" + name);
    EXPECT_FALSE(gpu.at("source").get<std::string>().empty()) << name;
    EXPECT_DOUBLE_EQ(gpu.at("peak_tflops_bf16").get<double>() * 1e12, p.peak_flops_bf16) << name;
    std::vector<double> samples = gpu.at("samples_ms").get<std::vector<double>>();
    ASSERT_EQ(samples.size(), 7U) << name;
    const double first = samples.front();
    std::sort(samples.begin(), samples.end());
    const double median_tflops = g.flops() / (samples[3] * 1e-3) / 1e12;
    EXPECT_NEAR(median_tflops, gpu.at("median_tflops").get<double>(), 1e-6) << name;
    PassWork pass;
    pass.gemms = {g};
    const double priced = g.flops() / p.roofline_seconds(pass, true) / 1e12;
    EXPECT_NEAR(gpu.at("priced_tflops").get<double>(), priced, 0.06)
        << path << ": " << name << " now prices 8192^3 at " << priced << " TFLOP/s; update the file and the results";
    const double burst = samples[3] / first;  // the first round's rate over the median's
    const double spread = samples.back() / samples.front();
    if (name == "h100_sxm.json") {
      EXPECT_GT(burst, 1.10) << "the H100's first round runs faster than its later ones";
      EXPECT_NEAR(g.flops() / (first * 1e-3) / p.peak_flops_bf16, 0.815, 0.001);
      EXPECT_NEAR(median_tflops / priced, 1.063, 0.002);
    } else {
      EXPECT_LT(spread, 1.01) << "the A100's rounds hold their rate";
      EXPECT_NEAR(median_tflops / priced, 1.280, 0.002);
    }
  }
}

TEST_F(ProfileSources, AMissingOrUnknownCitationIsRefusedByName) {
  nlohmann::json j = shipped("a100_80gb_sxm.json");
  ASSERT_EQ(refusal(j), "");
  nlohmann::json missing = j;
  missing["sources"].erase("intra_node.bandwidth_GBps");
  EXPECT_NE(refusal(missing).find("sources has no entry for 'intra_node.bandwidth_GBps'"), std::string::npos)
      << refusal(missing);
  nlohmann::json unknown = j;
  unknown["sources"]["nvlink_magic"] = "a blog";
  EXPECT_NE(refusal(unknown).find("'nvlink_magic', which is not a number of this profile"), std::string::npos)
      << refusal(unknown);
  nlohmann::json empty = j;
  empty["sources"]["memory_bandwidth_GBps"] = "";
  EXPECT_NE(refusal(empty).find("sources.memory_bandwidth_GBps must be a non-empty string"), std::string::npos)
      << refusal(empty);
  nlohmann::json not_object = j;
  not_object["sources"] = "the datasheet";
  EXPECT_NE(refusal(not_object).find("'sources' must be an object"), std::string::npos) << refusal(not_object);
  // Without a roofline the curve's key is not a number of the profile.
  nlohmann::json flat = j;
  flat.erase("peak_tflops");
  flat.erase("gemm_efficiency");
  flat.erase("attention_efficiency");
  flat["sources"].erase("attention_efficiency");
  for (const char* k : {"sm_count", "gemm_tiles", "kernel_launch_us", "gemm_shape_efficiency", "attention_rates"}) {
    flat.erase(k);
    flat["sources"].erase(k);
  }
  EXPECT_NE(refusal(flat).find("'gemm_efficiency', which is not a number of this profile"), std::string::npos)
      << refusal(flat);
  // The node's core counts (edited for a target node) need no citation, and may have one.
  nlohmann::json cores = j;
  cores["cores_per_node"] = 2;
  cores["measured_ranks_per_node"] = 2;
  EXPECT_EQ(refusal(cores), "");
  cores["sources"]["cores_per_node"] = "the target machine's lscpu";
  EXPECT_EQ(refusal(cores), "");
  // A profile without sources still loads (measured profiles carry their own evidence).
  nlohmann::json none = j;
  none.erase("sources");
  EXPECT_EQ(refusal(none), "");
  EXPECT_TRUE(load_profile(write("none.json", none.dump())).sources.empty());
}

TEST(SpreadCollective, NicsInParallelAcrossNodesAndTheFlatRingAtOnePerNode) {
  HardwareProfile p;
  p.intra_node = {3e-6, 235e9};
  p.inter_node = {12e-6, 25e9};
  const double bytes = 4e9;
  // One node: the intra-node ring, as before.
  EXPECT_DOUBLE_EQ(p.spread_collective_s(bytes, 8, 8, true), p.intra_node.all_reduce_s(bytes, 8));
  EXPECT_DOUBLE_EQ(p.spread_collective_s(bytes, 8, 8, false), p.intra_node.all_reduce_s(bytes, 8) / 2);
  // One rank per node (a tp8 group's dp peers): the flat ring over the NICs, as the link formula.
  EXPECT_DOUBLE_EQ(p.spread_collective_s(bytes, 4, 1, true), p.inter_node.all_reduce_s(bytes, 4));
  // 32 ranks, 8 per node: each NIC carries 2 · 31/32 · bytes/8 (0.0388 s at 25 GB/s), NVLink 2 · 31/32 · bytes
  // (0.0330 s at 235 GB/s): the NICs set it, 8x faster than one flat ring through a single NIC (0.31 s).
  const double nics = 2.0 * 31 / 32 * bytes / 8 / 25e9;
  EXPECT_NEAR(p.spread_collective_s(bytes, 32, 8, true), nics + 2 * (28 * 3e-6 + 3 * 12e-6), 1e-12);
  // Twice the NIC bandwidth: NVLink sets it.
  p.inter_node.bandwidth_Bps = 50e9;
  EXPECT_NEAR(p.spread_collective_s(bytes, 32, 8, true), 2.0 * 31 / 32 * bytes / 235e9 + 2 * (28 * 3e-6 + 3 * 12e-6),
              1e-12);
  p.inter_node.bandwidth_Bps = 25e9;
  EXPECT_LT(p.spread_collective_s(bytes, 32, 8, true) * 7, p.inter_node.all_reduce_s(bytes, 32));
  // H100-like (48 GB/s NICs, 367 GB/s NVLink): 8 x 48 = 384 > 367, NVLink sets a reduce-scatter too.
  p.intra_node = {3e-6, 367e9};
  p.inter_node = {12e-6, 48e9};
  EXPECT_NEAR(p.spread_collective_s(bytes, 32, 8, false), 31.0 / 32 * bytes / 367e9 + 28 * 3e-6 + 3 * 12e-6, 1e-12);
}

// NCCL's ring crosses each node boundary on every channel, so with the NICs the bottleneck the bus bandwidth
// (nccl-tests' busbw = bytes / time x f (n - 1) / n) is per_node x the NIC's at any node count: NVIDIA's published
// DGX A100 figure, 192 GB/s = 8 x 24 GB/s, the same as one 200 Gb NIC's 24 GB/s times 8 (profiles' sources). A
// hierarchical form (each NIC carrying f (k - 1) / k of the bytes / per_node) would report 2x that at 2 nodes.
// From 4 nodes on, a large all-reduce is the ring's (the tree moves 2 · bytes per node, the ring 2 (n - 1) / n);
// on 2 nodes it is the tree's (TreeAllReduce below).
TEST(SpreadCollective, NicBoundBusBandwidthIsTheNodesNicsAtAnyNodeCount) {
  HardwareProfile p;
  p.intra_node = {0, 232e9};
  p.inter_node = {0, 24e9};
  const double bytes = 16e9;
  for (int nodes : {2, 4, 16, 64}) {
    const int n = 8 * nodes;
    const double ring_ar = bytes / p.ring_collective_s(bytes, n, 8, true) * 2.0 * (n - 1) / n;
    const double busbw_rs = bytes / p.spread_collective_s(bytes, n, 8, false) * (n - 1.0) / n;
    EXPECT_NEAR(ring_ar, 192e9, 1e-3 * 192e9) << nodes << " nodes";
    EXPECT_NEAR(busbw_rs, 192e9, 1e-3 * 192e9) << nodes << " nodes";
    if (nodes > 2) {
      const double busbw_ar = bytes / p.spread_collective_s(bytes, n, 8, true) * 2.0 * (n - 1) / n;
      EXPECT_NEAR(busbw_ar, 192e9, 1e-3 * 192e9) << nodes << " nodes";
    }
  }
  // 2 nodes of 8: each NIC moves 2 · 15/16 · bytes / 8 (0.156 s at 24 GB/s), not 2 · 1/2 · bytes / 8 (0.083 s).
  EXPECT_NEAR(p.ring_collective_s(bytes, 16, 8, true), 2.0 * 15 / 16 * bytes / 8 / 24e9, 1e-12);
  // 4 ranks per node (a tp2 group's dp peers): 4 NICs of the node carry the group's rings.
  EXPECT_NEAR(p.ring_collective_s(bytes, 16, 4, true), 2.0 * 15 / 16 * bytes / 4 / 24e9, 1e-12);
}

// NCCL's tree all-reduce on 2 nodes puts bytes on the network and 2 · bytes on NVLink (NVIDIA/nccl issues #330,
// #946: "the Tree performance can go up to ~2x the network speed", NCCL picks it on 2 nodes for large sizes), so a
// 2-node all-reduce of DGX A100s is NVLink-bound above the NICs' 192 GB/s; a reduce-scatter stays the ring's.
TEST(TreeAllReduce, TwoNodesPutHalfTheRingsBytesOnTheNetwork) {
  HardwareProfile p;
  p.intra_node = {3e-6, 232e9};
  p.inter_node = {9.95e-6, 24e9};
  const double bytes = 16e9;
  // Network bytes / 8 / 24e9 = 0.0833 s, NVLink 2 · bytes / 232e9 = 0.138 s: NVLink sets it; 7 chain steps and one
  // tree level, up and down.
  const double tree = 2.0 * bytes / 232e9 + 2 * (7 * 3e-6 + 1 * 9.95e-6);
  EXPECT_NEAR(p.tree_all_reduce_s(bytes, 16, 8), tree, 1e-12);
  EXPECT_NEAR(p.spread_collective_s(bytes, 16, 8, true), tree, 1e-12);
  EXPECT_LT(tree, p.ring_collective_s(bytes, 16, 8, true));
  const double busbw = bytes / tree * 2.0 * 15 / 16;  // 217 GB/s, above the 8 NICs' 192
  EXPECT_GT(busbw, 215e9);
  EXPECT_LT(busbw, 232e9);
  // Only the all-reduce has a tree.
  EXPECT_DOUBLE_EQ(p.spread_collective_s(bytes, 16, 8, false), p.ring_collective_s(bytes, 16, 8, false));
  // One rank per node on 2 nodes: tree and ring both move bytes over the one NIC.
  EXPECT_NEAR(p.tree_all_reduce_s(bytes, 2, 1), bytes / 24e9 + 2 * 9.95e-6, 1e-12);
}

// The choice NCCL makes by size and node count, on the shipped H100 links (NVLink 367.2 GB/s and 2.83 us per step,
// 48 GB/s per NIC and 12 us): at 512 nodes of 8 the ring pays 2 (3584 · 2.83 + 511 · 12) us = 32.5 ms of latency,
// the tree 2 (7 · 2.83 + 9 · 12) us = 0.26 ms, so a 16 GiB all-reduce runs at the tree's 366 GB/s bus bandwidth
// where the ring alone gives 272 (the published 4-512-node nccl-tests scan, arXiv 2411.13055 as reproduced in
// stas00/ml-engineering, shows about 345 at 512 nodes); on 4 nodes the same all-reduce is the ring's.
TEST(TreeAllReduce, TheFasterOfRingAndTreeBySizeAndNodeCount) {
  HardwareProfile p;
  p.intra_node = {2.83e-6, 367.2e9};
  p.inter_node = {12e-6, 48e9};
  const double gib16 = 17179869184.0;
  const int n512 = 8 * 512;
  const double ring = 2.0 * 4095 / 4096 * gib16 / 367.2e9 + 2 * (3584 * 2.83e-6 + 511 * 12e-6);
  const double tree = 2.0 * gib16 / 367.2e9 + 2 * (7 * 2.83e-6 + 9 * 12e-6);
  EXPECT_NEAR(p.ring_collective_s(gib16, n512, 8, true), ring, 1e-12);
  EXPECT_NEAR(p.tree_all_reduce_s(gib16, n512, 8), tree, 1e-12);
  EXPECT_NEAR(p.spread_collective_s(gib16, n512, 8, true), tree, 1e-12);
  const auto busbw = [&](double seconds, int n) { return gib16 / seconds * 2.0 * (n - 1) / n; };
  EXPECT_NEAR(busbw(ring, n512), 272.4e9, 0.5e9);
  EXPECT_NEAR(busbw(tree, n512), 366.1e9, 0.5e9);
  // 4 nodes, 16 GiB: the ring's bandwidth term (2 · 31/32) beats the tree's 2 · bytes by more than its 0.23 ms of
  // latency.
  EXPECT_DOUBLE_EQ(p.spread_collective_s(gib16, 32, 8, true), p.ring_collective_s(gib16, 32, 8, true));
  EXPECT_LT(p.ring_collective_s(gib16, 32, 8, true), p.tree_all_reduce_s(gib16, 32, 8));
  // 4 nodes, 1 MiB: latency-bound, the tree's.
  EXPECT_DOUBLE_EQ(p.spread_collective_s(1 << 20, 32, 8, true), p.tree_all_reduce_s(1 << 20, 32, 8));
  EXPECT_LT(p.tree_all_reduce_s(1 << 20, 32, 8), p.ring_collective_s(1 << 20, 32, 8, true));
  // A flat group (one rank per node, a tp8 layout's dp peers) of 32 nodes: the tree at 64 MiB, the ring at 16 GiB.
  EXPECT_DOUBLE_EQ(p.spread_collective_s(64 << 20, 32, 1, true), p.tree_all_reduce_s(64 << 20, 32, 1));
  EXPECT_DOUBLE_EQ(p.spread_collective_s(gib16, 32, 1, true), p.ring_collective_s(gib16, 32, 1, true));
}

}  // namespace
}  // namespace cleave::partition::profile_sources_test
