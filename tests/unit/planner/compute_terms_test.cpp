// The compute term's parts on a roofline profile (docs/planner.md, "The step, term by term"): with a per-shape table
// (XLA's sm_90 grid, profiles/checks/h100_sxm_xla_gemm_table.json, set on the H100 profile) each bf16 library GEMM at
// the table (no wave term on top), f32 GEMMs and the fused attention kernel's products at the size curve; the
// elementwise term is the passes' streamed bytes over the measured memory bandwidth and the kernel_launch term their
// kernels times the cited launch cost, each equal to its formula over a whole plan; the shipped profiles cite the new
// numbers. XLA's table is held against published back-to-back GEMM streams (profiles/checks/h100_sxm_gemm_streams.json),
// and so is the shipped H100 curve (Vidur's transformer GEMMs), which prices below both: evidence, not read by the
// cost model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/hardware_profile.hpp"

namespace cleave::planner::compute_terms_test {
namespace {

namespace fs = std::filesystem;
using partition::Gemm;
using partition::HardwareProfile;
using partition::PassWork;

HardwareProfile shipped(const std::string& name) {
  return partition::load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/" + name);
}

// The shipped H100 profile with XLA's sm_90 grid, which priced its bf16 library GEMMs until 2026-11-30 (profiles/
// README.md, gemm_shape_efficiency), as its shape table.
HardwareProfile h100_with_xla_table() {
  HardwareProfile p = shipped("h100_sxm.json");
  const std::string path = std::string(CLEAVE_SOURCE_DIR) + "/profiles/checks/h100_sxm_xla_gemm_table.json";
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<partition::GemmShapeTable::Point> points;
  for (const auto& q : j.at("gemm_shape_efficiency")) {
    points.push_back({q.at(0).get<double>(), q.at(1).get<double>(), q.at(2).get<double>(), q.at(3).get<double>()});
  }
  p.gemm_shape_efficiency = partition::GemmShapeTable(points, path);
  return p;
}

TEST(ComputeTerms, H100BfloatGemmsTakeTheMeasuredShapeTableWithoutTheWaveTerm) {
  const HardwareProfile h100 = h100_with_xla_table();
  ASSERT_TRUE(shipped("h100_sxm.json").gemm_shape_efficiency.empty()) << "the shipped profile prices by its curve";
  ASSERT_FALSE(h100.gemm_shape_efficiency.empty());
  // 4096^3 is a table point: 783.3 TFLOP/s measured, 0.792 of 989.
  const Gemm square{4096, 4096, 4096};
  EXPECT_DOUBLE_EQ(h100.gemm_efficiency_of(square, true), 0.792);
  EXPECT_DOUBLE_EQ(h100.gemm_seconds(square, true), square.flops() / (989e12 * 0.792));
  // A narrow K runs far below the square (4096 x 4096 x 512: 543.1 TFLOP/s, 0.5491).
  const Gemm narrow{4096, 4096, 512};
  EXPECT_DOUBLE_EQ(h100.gemm_efficiency_of(narrow, true), 0.5491);
  EXPECT_LT(h100.gemm_efficiency_of(narrow, true), h100.gemm_efficiency_of(square, true) - 0.2);
  // One tile past a full wave on 132 SMs: the table prices it (its shapes carry their quantization), no wave term.
  const Gemm one_over{256.0 * 132 + 1, 128, 4096};
  ASSERT_GT(h100.gemm_wave_seconds(one_over, true), 0.0);
  const double eff = h100.gemm_efficiency_of(one_over, true);
  EXPECT_DOUBLE_EQ(eff, h100.gemm_shape_efficiency.at(one_over.m, one_over.n, one_over.k));
  EXPECT_DOUBLE_EQ(h100.gemm_seconds(one_over, true),
                   std::max(one_over.flops() / (989e12 * eff), one_over.traffic_bytes(2.0) / h100.memory_bandwidth_Bps));
  // f32 GEMMs and the fused attention kernel's products keep the size curve (and the attention cap).
  EXPECT_DOUBLE_EQ(h100.gemm_efficiency_of(square, false), h100.gemm_efficiency_at(square.flops(), false));
  Gemm fused = square;
  fused.fused_attention = true;
  EXPECT_DOUBLE_EQ(h100.gemm_efficiency_of(fused, true),
                   std::min(h100.gemm_efficiency_at(fused.flops(), true), h100.attention_efficiency));
}

// The hypothesis that XLA's table (each GEMM a single kernel from an idle GPU) is faster than GEMMs run back to
// back at the power limit, held against published streams: every priced_tflops the check file states is what the
// profile prices that GEMM at now (a change to the table or its pricing must revisit the evidence), and over the
// compared streams the median measured / priced is within 5% of 1 (no published stream supports a derate beyond
// that); the one stream below 0.95 is the longest (10240^3, 90 ms: 0.896), recorded as measured, not applied. The
// shipped curve (Vidur's transformer GEMMs, no shape table) prices the same squares lower: every compared stream
// ran 1.05-1.31x faster than it prices, the disagreement its source records at 4096^3.
TEST(ComputeTerms, H100ShapeTableAgainstPublishedBackToBackStreams) {
  const HardwareProfile h100 = h100_with_xla_table();
  const HardwareProfile curve = shipped("h100_sxm.json");
  const std::string path = std::string(CLEAVE_SOURCE_DIR) + "/profiles/checks/h100_sxm_gemm_streams.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json checks = nlohmann::json::parse(in);
  ASSERT_DOUBLE_EQ(checks.at("peak_tflops_bf16").get<double>() * 1e12, h100.peak_flops_bf16);
  std::vector<double> ratios;
  double longest_ms = 0, longest_ratio = 0;
  for (const auto& s : checks.at("streams")) {
    const Gemm g{s.at("m").get<double>(), s.at("n").get<double>(), s.at("k").get<double>()};
    const double priced = h100.gemm_efficiency_of(g, true) * h100.peak_flops_bf16 / 1e12;
    EXPECT_NEAR(s.at("priced_tflops").get<double>(), priced, 0.06)
        << path << ": the profile now prices " << g.m << " x " << g.n << " x " << g.k << " at " << priced
        << " TFLOP/s; update the file and RESULTS.md's comparison";
    EXPECT_FALSE(s.at("source").get<std::string>().empty());
    if (!s.at("compared").get<bool>()) {
      EXPECT_FALSE(s.at("why_not").get<std::string>().empty()) << "a stream left out says why";
      continue;
    }
    const double ratio = s.at("measured_tflops").get<double>() / priced;
    ratios.push_back(ratio);
    PassWork one;
    one.gemms = {g};
    const double curve_ratio = s.at("measured_tflops").get<double>() * 1e12 / (g.flops() / curve.roofline_seconds(one, true));
    EXPECT_GT(curve_ratio, 1.05) << g.m << " x " << g.n << " x " << g.k;
    EXPECT_LT(curve_ratio, 1.35) << g.m << " x " << g.n << " x " << g.k;
    if (s.at("stream_ms").get<double>() > longest_ms) {
      longest_ms = s.at("stream_ms").get<double>();
      longest_ratio = ratio;
    }
    if (ratio < 0.95) {
      EXPECT_EQ(g.m, 10240.0) << "only the longest stream was recorded below 0.95 of the price";
    }
  }
  ASSERT_EQ(ratios.size(), 5U);
  std::sort(ratios.begin(), ratios.end());
  const double median = ratios[ratios.size() / 2];
  EXPECT_NEAR(median, 1.0, 0.05) << "median measured / priced over the published streams";
  EXPECT_NEAR(longest_ratio, 0.896, 0.001);
  EXPECT_DOUBLE_EQ(longest_ms, 89.5);
}

TEST(ComputeTerms, ElementwiseIsBytesOverMeasuredBandwidthAndLaunchIsKernelsTimesItsCost) {
  for (const char* name : {"a100_80gb_sxm.json", "h100_sxm.json"}) {
    const HardwareProfile p = shipped(name);
    EXPECT_DOUBLE_EQ(p.kernel_launch_s, 1.3e-6) << name;
    PassWork pass;
    pass.stream_bytes = 3e9;
    pass.kernels = 7;
    EXPECT_DOUBLE_EQ(p.elementwise_seconds(pass), 3e9 / p.memory_bandwidth_Bps) << name;
    EXPECT_DOUBLE_EQ(p.launch_seconds(pass), 7 * 1.3e-6) << name;
    EXPECT_DOUBLE_EQ(p.roofline_seconds(pass, true), 3e9 / p.memory_bandwidth_Bps + 7 * 1.3e-6) << name;
  }
  // Measured STREAM triads (Azure's ND A100 v4 and ND H100 v5 BabelStream), not 0.8 x the datasheets.
  EXPECT_DOUBLE_EQ(shipped("a100_80gb_sxm.json").memory_bandwidth_Bps, 1.70e12);
  EXPECT_DOUBLE_EQ(shipped("h100_sxm.json").memory_bandwidth_Bps, 2.97e12);
  // Every new number is cited, none ASSUMED but the A100's launch cost (the H100's figure).
  for (const char* name : {"a100_80gb_sxm.json", "h100_sxm.json"}) {
    const HardwareProfile p = shipped(name);
    for (const auto& [key, citation] : p.sources) {
      if (key == "memory_bandwidth_GBps" || key == "gemm_shape_efficiency") {
        EXPECT_EQ(citation.find("ASSUMED"), std::string::npos) << name << " " << key;
      }
    }
    const auto keys = p.sourced_keys();
    EXPECT_NE(std::find(keys.begin(), keys.end(), "kernel_launch_us"), keys.end()) << name;
  }
  // The H100's per-shape table is evidence now (profiles/checks), cited there, not a number of the profile.
  const auto keys = shipped("h100_sxm.json").sourced_keys();
  EXPECT_EQ(std::find(keys.begin(), keys.end(), "gemm_shape_efficiency"), keys.end());
  std::ifstream in(std::string(CLEAVE_SOURCE_DIR) + "/profiles/checks/h100_sxm_xla_gemm_table.json");
  const std::string xla = nlohmann::json::parse(in).at("source").get<std::string>();
  EXPECT_NE(xla.find("kDefaultMatmulPTable"), std::string::npos);
  EXPECT_EQ(xla.find("ASSUMED"), std::string::npos);
}

// Over a whole plan (one H100, bf16, 8 micro-batches of one sample, pp 1): the elementwise term is 8 x each block's
// streamed bytes over the bandwidth, the kernel_launch term 8 x its kernels x 1.3 us, summed over the blocks and
// their three passes; the forward, input_grad and weight_grad terms hold the GEMMs alone.
TEST(ComputeTerms, ThePlansElementwiseAndLaunchTermsAreTheirFormulas) {
  const fs::path dir = fs::temp_directory_path() / ("cleave_compute_terms_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string text = R"({"model": {"type": "llama", "vocab_size": 256, "d_model": 128, "n_layers": 2,
      "n_heads": 4, "n_kv_heads": 2, "seq_len": 64}, "batch": {"global_batch_size": 8, "micro_batch_size": 1},
      "device": {"precision": "bf16"}, "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";
  const std::string path = (dir / "llama.json").string();
  std::ofstream(path) << text;
  const HardwareProfile h100 = shipped("h100_sxm.json");
  PlanChoice choice;
  choice.global_batch = 8;
  const PlanEstimate e = estimate_plan(path, {}, choice, h100, SearchOptions{1, 0});
  ASSERT_TRUE(e.valid) << e.reason;
  config::RunConfig c = config::parse_config(text, "<string>", {});
  c.resolve(1);
  const run_plan::Plan plan = run_plan::make_plan(c, 8, 0);
  double bytes = 0, kernels = 0, gemm_s = 0;
  for (const auto& block : plan.spec.blocks) {
    const partition::BlockWork w = partition::block_work(block, DType::kBF16, partition::Recompute::kNone, 1, 1);
    for (const PassWork* pass : {&w.forward, &w.input_grad, &w.weight_grad}) {
      bytes += pass->stream_bytes;
      kernels += pass->kernels;
      gemm_s += h100.gemm_pass_seconds(*pass, true);
    }
  }
  ASSERT_GT(kernels, 0.0);
  EXPECT_NEAR(e.breakdown[StepTerm::kElementwise], 8 * bytes / h100.memory_bandwidth_Bps, 1e-12);
  EXPECT_NEAR(e.breakdown[StepTerm::kKernelLaunch], 8 * kernels * 1.3e-6, 1e-12);
  EXPECT_NEAR(e.breakdown[StepTerm::kForward] + e.breakdown[StepTerm::kInputGrad] + e.breakdown[StepTerm::kWeightGrad],
              8 * gemm_s, 1e-12);
  // Per block kind, the two terms are listed too and sum to them.
  double listed_bytes = 0, listed_launch = 0;
  for (const auto& k : e.breakdown.blocks) {
    listed_bytes += k.elementwise_total();
    listed_launch += k.launch_total();
  }
  EXPECT_NEAR(listed_bytes, e.breakdown[StepTerm::kElementwise], 1e-12);
  EXPECT_NEAR(listed_launch, e.breakdown[StepTerm::kKernelLaunch], 1e-12);
  fs::remove_all(dir);
}

// The run's own kernels (SearchOptions::run_kernels: simulate --cross-entropy float32, --hidden-dropout,
// --dense-embedding-grad) over a whole
// plan (one H100, gpt, bf16, 8 micro-batches, full recomputation): the elementwise and kernel_launch terms grow by 8 x
// run_kernels_work's bytes over the bandwidth and its kernels x 1.3 us, the GEMM terms do not move, and the step grows.
TEST(ComputeTerms, TheRunsOwnKernelsAddTheirBytesAndLaunchesOnly) {
  const fs::path dir = fs::temp_directory_path() / ("cleave_compute_terms_run_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string text = R"({"model": {"type": "gpt", "vocab_size": 512, "d_model": 128, "n_layers": 2,
      "n_heads": 4, "seq_len": 64}, "batch": {"global_batch_size": 8, "micro_batch_size": 1},
      "train": {"recompute": "full"}, "device": {"precision": "bf16"}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
  const std::string path = (dir / "gpt.json").string();
  std::ofstream(path) << text;
  const HardwareProfile h100 = shipped("h100_sxm.json");
  PlanChoice choice;
  choice.global_batch = 8;
  choice.recompute = partition::Recompute::kFull;
  SearchOptions plain{1, 0}, run{1, 0};
  run.run_kernels.cross_entropy = partition::CrossEntropyKind::kFloat32;
  run.run_kernels.hidden_dropout = true;
  run.run_kernels.dense_embedding_grad = true;
  const PlanEstimate a = estimate_plan(path, {}, choice, h100, plain);
  const PlanEstimate e = estimate_plan(path, {}, choice, h100, run);
  ASSERT_TRUE(a.valid && e.valid) << a.reason << e.reason;
  config::RunConfig c = config::parse_config(text, "<string>", {});
  c.resolve(1);
  const run_plan::Plan plan = run_plan::make_plan(c, 8, 0);
  double bytes = 0, kernels = 0;
  for (const auto& block : plan.spec.blocks) {
    const partition::BlockWork w =
        partition::run_kernels_work(block, DType::kBF16, run.run_kernels, partition::Recompute::kFull, 1, 1);
    for (const PassWork* pass : {&w.forward, &w.input_grad, &w.weight_grad}) {
      bytes += pass->stream_bytes;
      kernels += pass->kernels;
    }
  }
  ASSERT_GT(bytes, 0.0);
  EXPECT_NEAR(e.breakdown[StepTerm::kElementwise] - a.breakdown[StepTerm::kElementwise],
              8 * bytes / h100.memory_bandwidth_Bps, 1e-12);
  EXPECT_NEAR(e.breakdown[StepTerm::kKernelLaunch] - a.breakdown[StepTerm::kKernelLaunch], 8 * kernels * 1.3e-6, 1e-12);
  for (const StepTerm t : {StepTerm::kForward, StepTerm::kInputGrad, StepTerm::kWeightGrad, StepTerm::kRecompute}) {
    EXPECT_NEAR(e.breakdown[t], a.breakdown[t], 1e-12);
  }
  EXPECT_GT(e.step_s, a.step_s);
  fs::remove_all(dir);
}

// FSDP2's all-gather copy-out (SearchOptions::fsdp2_copy_out: simulate --fsdp2-copy-out) on a ZeRO-3 plan at dp 2
// (one H100, gpt untied, bf16, 4 micro-batches a rank): per micro-batch, before each block's F and again before its
// I, one kernel reading and writing the block's gathered bf16 parameters, so the elementwise term grows by
// 4 x 2 passes x 2 x 2 bytes x every parameter / bandwidth and kernel_launch by 4 x 2 x blocks x 1.3 us; the GEMM and
// recompute terms do not move. Below ZeRO-3 (nothing gathered) it changes nothing.
TEST(ComputeTerms, Fsdp2CopyOutReadsAndWritesTheGatheredParametersBeforeFAndI) {
  const fs::path dir = fs::temp_directory_path() / ("cleave_compute_terms_fsdp2_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string text = R"({"model": {"type": "gpt", "vocab_size": 512, "d_model": 128, "n_layers": 2,
      "n_heads": 4, "seq_len": 64, "tie_embeddings": false}, "batch": {"global_batch_size": 8, "micro_batch_size": 1},
      "train": {"recompute": "full"}, "device": {"precision": "bf16"}, "optimizer": {"type": "adamw"},
      "data": {"type": "synthetic"}})";
  const std::string path = (dir / "gpt.json").string();
  std::ofstream(path) << text;
  const HardwareProfile h100 = shipped("h100_sxm.json");
  PlanChoice choice;
  choice.global_batch = 8;
  choice.dp = 2;
  choice.zero_stage = 3;
  choice.recompute = partition::Recompute::kFull;
  SearchOptions plain{2, 0}, fsdp2{2, 0};
  fsdp2.fsdp2_copy_out = true;
  const PlanEstimate a = estimate_plan(path, {}, choice, h100, plain);
  const PlanEstimate e = estimate_plan(path, {}, choice, h100, fsdp2);
  ASSERT_TRUE(a.valid && e.valid) << a.reason << e.reason;
  config::RunConfig c = config::parse_config(text, "<string>", {});
  c.resolve(1);
  const run_plan::Plan plan = run_plan::make_plan(c, 8, 0);
  const double params = static_cast<double>(partition::unique_param_count(plan.spec, 0, plan.spec.blocks.size()));
  const double blocks = static_cast<double>(plan.spec.blocks.size());
  ASSERT_GT(params, 0.0);
  const double micro_batches = 4, passes = 2, bf16 = 2;
  EXPECT_NEAR(e.breakdown[StepTerm::kElementwise] - a.breakdown[StepTerm::kElementwise],
              micro_batches * passes * 2 * bf16 * params / h100.memory_bandwidth_Bps, 1e-12);
  EXPECT_NEAR(e.breakdown[StepTerm::kKernelLaunch] - a.breakdown[StepTerm::kKernelLaunch],
              micro_batches * passes * blocks * 1.3e-6, 1e-12);
  for (const StepTerm t : {StepTerm::kForward, StepTerm::kInputGrad, StepTerm::kWeightGrad, StepTerm::kRecompute}) {
    EXPECT_NEAR(e.breakdown[t], a.breakdown[t], 1e-12);
  }
  EXPECT_GT(e.step_s, a.step_s);
  choice.zero_stage = 2;
  const PlanEstimate a2 = estimate_plan(path, {}, choice, h100, plain);
  const PlanEstimate e2 = estimate_plan(path, {}, choice, h100, fsdp2);
  ASSERT_TRUE(a2.valid && e2.valid) << a2.reason << e2.reason;
  EXPECT_EQ(e2.step_s, a2.step_s);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cleave::planner::compute_terms_test
