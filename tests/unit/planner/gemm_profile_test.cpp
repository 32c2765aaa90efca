// The measured GEMM profile (engine/planner/gemm_profile.hpp, `cleave profile --gemm`) without a GPU:
//  - the training GEMMs are the linear layers' GEMMs block_work prices (same m, n, k per pass);
//  - measure_gemms runs on the CPU backend through the same seam calls as on cuda (events, to_host, gemm) and
//    checks every GEMM; a backend whose GEMM is wrong (writes nothing, or one element off) is refused by name;
//  - the curve from synthetic timings is worked by hand (one GEMM per bin, two in one bin), and a rate above the
//    peak or a dtype without timings is refused;
//  - the measured profile writes and reads back to the same text, its f32 curve prices f32 GEMMs and its bf16 curve
//    bf16 ones, and the planner's step time follows the curve (halving the f32 curve doubles an fp32 plan's GEMM
//    time and leaves a bf16 plan's alone);
//  - a bad file is refused naming the key.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/planner/gemm_profile.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/ops.hpp"
#include "partition/block_work.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::gemm_profile_test {
namespace {

namespace fs = std::filesystem;

class GemmProfile : public testing::ScratchDirTest {
 protected:
  GemmProfile() : ScratchDirTest("cleave_gemm_profile_test_") {}


  static HardwareProfile h100() { return load_profile(std::string(CLEAVE_SOURCE_DIR) + "/profiles/h100_sxm.json"); }

  // A timing that ran at `fraction` of `peak`: an m x n x k GEMM with 2mnk = flops.
  static GemmTiming timing(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, double fraction, double peak) {
    GemmTiming t;
    t.gemm = {fmt::format("synthetic {}x{}x{}", m, n, k), GemmPass::kForward, m, n, k, false, true};
    t.dtype = dtype;
    t.seconds = t.gemm.flops() / (fraction * peak);
    return t;
  }

};

TEST_F(GemmProfile, TrainingGemmsAreTheLinearGemmsBlockWorkPrices) {
  partition::GptConfig c;
  c.vocab_size = 64;
  c.d_model = 96;
  c.n_layers = 1;
  c.n_heads = 4;
  c.seq_len = 50;
  const partition::ModelSpec spec = partition::make_gpt_spec(c);
  const partition::BlockWork w = partition::block_work(spec.blocks[1], DType::kF32, partition::Recompute::kNone, 1, 2);
  // block_work's linear GEMMs (batch 1; the attention core's are batched over heads) as (m, n, k) per pass.
  std::map<GemmPass, std::multiset<std::tuple<double, double, double>>> expected, got;
  for (const auto& [pass, work] : {std::pair{GemmPass::kForward, &w.forward}, std::pair{GemmPass::kInputGrad, &w.input_grad},
                                   std::pair{GemmPass::kWeightGrad, &w.weight_grad}}) {
    for (const partition::Gemm& g : work->gemms) {
      if (g.batch == 1) expected[pass].insert({g.m, g.n, g.k});
    }
  }
  for (const TrainingGemm& g : block_gemms({96, 384, 100})) {  // 2 samples x 50 positions
    got[g.pass].insert({static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k)});
    // op(A) [m, k], op(B) [k, n]: the weight gradient reads dy transposed, the forward W transposed.
    EXPECT_EQ(g.trans_a, g.pass == GemmPass::kWeightGrad) << g.what;
    EXPECT_EQ(g.trans_b, g.pass == GemmPass::kForward) << g.what;
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got[GemmPass::kForward].size(), 4u);
  // The default grid: increasing FLOPs, GPT-2 124M's fc1 and the LM head in it, 6.7B-wide blocks at 8192 tokens.
  const std::vector<TrainingGemm> all = training_gemms();
  for (std::size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].flops(), all[i].flops());
  const auto has = [&](const std::string& what) {
    return std::any_of(all.begin(), all.end(), [&](const TrainingGemm& g) { return g.what == what; });
  };
  EXPECT_TRUE(has("fc1 forward d768 ff3072 tokens 1024"));
  EXPECT_TRUE(has("lm_head weight grad d768 V50257 tokens 4096"));
  EXPECT_TRUE(has("fc2 input grad d4096 ff16384 tokens 8192"));
  EXPECT_TRUE(has("proj forward d257 ff1028 tokens 100"));
  EXPECT_LT(training_gemms(true).size(), all.size());
}

TEST_F(GemmProfile, MeasuresOnTheCpuAndChecksEveryGemm) {
  const ops::Context cpu;
  std::vector<TrainingGemm> gemms = linear_gemms("odd", 37, 19, 53);
  for (TrainingGemm g : block_gemms({96, 384, 100})) gemms.push_back(g);
  GemmTimingOptions options;
  options.samples = 2;
  options.min_sample_s = 1e-4;
  options.seed = 7;
  const GemmProfileResult r = measure_gemms(cpu, gemms, {DType::kBF16, DType::kF32}, options);
  ASSERT_EQ(r.timings.size(), 2 * gemms.size());
  EXPECT_EQ(r.skipped, 0);
  for (const GemmTiming& t : r.timings) {
    EXPECT_GT(t.seconds, 0.0) << t.gemm.what;
    EXPECT_GE(t.launches, 1) << t.gemm.what;
    EXPECT_EQ(t.checked, 48) << t.gemm.what;  // 3 rows x 16 columns
    // Relative to the sum of |products|: a bf16 output's rounding is at most 2^-9 of it; f32 accumulation over
    // k <= 384 at most k·2^-24 = 2.3e-5 (the worst case; random signs give far less).
    const bool bf16_out = t.dtype == DType::kBF16 && t.gemm.pass != GemmPass::kWeightGrad;
    EXPECT_LT(t.worst_error, bf16_out ? 2.5e-3 : 5e-5) << t.gemm.what << " " << dtype_name(t.dtype);
  }
  EXPECT_EQ(r.timings.front().dtype, DType::kBF16);  // bf16 first: a spent budget skips f32's largest
  EXPECT_EQ(r.timings.back().dtype, DType::kF32);
  // A spent budget starts nothing more and says how many it skipped.
  options.budget_s = 1e-12;
  const GemmProfileResult none = measure_gemms(cpu, gemms, {DType::kBF16, DType::kF32}, options);
  EXPECT_TRUE(none.timings.empty());
  EXPECT_EQ(none.skipped, static_cast<int>(2 * gemms.size()));
  // The copy bandwidth is a rate: positive and finite (on this machine's memory: between 100 MB/s and 10 TB/s).
  const double copy = measure_copy_bandwidth(cpu, 8 << 20, 3);
  EXPECT_GT(copy, 1e8);
  EXPECT_LT(copy, 1e13);
}

// Backends whose GEMM is broken (the CPU table otherwise): measuring through them must fail, naming the GEMM.
void gemm_writes_nothing(const ops::Context&, const ops::GemmProblem&) {}
void gemm_last_element_off(const ops::Context& ctx, const ops::GemmProblem& p) {
  ops::cpu_backend().gemm(ctx, p);
  float* c = p.c.data<float>();
  c[(p.m - 1) * p.ldc + p.n - 1] += 0.5f;
}

TEST_F(GemmProfile, ABrokenGemmIsNotAProfile) {
  const std::vector<TrainingGemm> gemms = linear_gemms("odd", 37, 19, 53);
  GemmTimingOptions options;
  options.samples = 1;
  options.min_sample_s = 1e-5;
  for (const auto& [slot, why] : {std::pair{&gemm_writes_nothing, "writes nothing"},
                                  std::pair{&gemm_last_element_off, "last element off by 0.5"}}) {
    ops::Backend broken = ops::cpu_backend();
    broken.gemm = slot;
    ops::Context ctx;
    ctx.backend = &broken;
    try {
      measure_gemms(ctx, gemms, {DType::kF32}, options);
      ADD_FAILURE() << "a GEMM that " << why << " was measured";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("odd forward (f32 inputs, f32 out, m 37 n 53 k 19) on cpu is wrong at"),
                std::string::npos) << e.what();
    }
  }
}

TEST_F(GemmProfile, CurveBinsByHalfDecadeAtTheBinsRate) {
  const double peak = 100e12;
  std::vector<GemmTiming> t = {
      timing(DType::kBF16, 1000, 1000, 50, 0.1, peak),    // 1e8 FLOPs
      timing(DType::kBF16, 1000, 1000, 500, 0.3, peak),   // 1e9
      timing(DType::kBF16, 1000, 1000, 1000, 0.6, peak),  // 2e9: the same half decade as 1e9
      timing(DType::kBF16, 1000, 1000, 5000, 0.5, peak),  // 1e10
      timing(DType::kF32, 1000, 1000, 500, 0.9, peak),    // another dtype: not in bf16's curve
  };
  const auto curve = efficiency_curve(t, DType::kBF16, peak);
  ASSERT_EQ(curve.size(), 3u);
  EXPECT_NEAR(curve[0].first, 1e8, 1e-3);
  EXPECT_NEAR(curve[0].second, 0.1, 1e-12);
  // 1e9 at 0.3 and 2e9 at 0.6 take equal times: 3e9 FLOPs over 2 x 1e9 / (0.3 peak) = 0.45 of peak, at sqrt(2) x 1e9.
  EXPECT_NEAR(curve[1].first, std::sqrt(2.0) * 1e9, 1e-3);
  EXPECT_NEAR(curve[1].second, 0.45, 1e-12);
  EXPECT_NEAR(curve[2].second, 0.5, 1e-12);
  EXPECT_NEAR(efficiency_curve(t, DType::kF32, peak).front().second, 0.9, 1e-12);
  auto message = [&](const std::vector<GemmTiming>& timings, DType dtype) {
    try {
      efficiency_curve(timings, dtype, peak);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  t.push_back(timing(DType::kBF16, 1000, 1000, 100, 1.25, peak));
  EXPECT_NE(message(t, DType::kBF16).find("above the assumed peak 100.0 TFLOP/s"), std::string::npos)
      << message(t, DType::kBF16);
  EXPECT_NE(message(t, DType::kBF16).find("--peak-tflops-bf16"), std::string::npos);
  EXPECT_NE(message({}, DType::kF32).find("no f32 GEMM was measured"), std::string::npos);
}

TEST_F(GemmProfile, MeasuredProfileRoundTripsAndPricesEachDtypeByItsCurve) {
  const HardwareProfile base = h100();
  GemmProfileResult r;
  for (const auto& [k, fraction] : {std::pair{50, 0.05}, std::pair{500, 0.4}, std::pair{5000, 0.75}}) {
    r.timings.push_back(timing(DType::kBF16, 1000, 1000, k, fraction, base.peak_flops_bf16));
    r.timings.push_back(timing(DType::kF32, 1000, 1000, k, fraction / 2, base.peak_flops_f32));
  }
  const HardwareProfile p = measured_gemm_profile(base, r, 141LL << 30, "NVIDIA H200 (test)", "synthetic timings");
  EXPECT_EQ(p.gemm_efficiency.size(), 3u);
  EXPECT_EQ(p.gemm_efficiency_f32.size(), 3u);
  EXPECT_EQ(p.measured_gemms.size(), 6u);
  EXPECT_EQ(p.device_memory, 141LL << 30);
  EXPECT_EQ(p.memory_bandwidth_Bps, base.memory_bandwidth_Bps);  // kept from the base
  EXPECT_NEAR(p.gemm_efficiency_at(1e10, true), 0.75, 1e-9);
  EXPECT_NEAR(p.gemm_efficiency_at(1e10, false), 0.375, 1e-9);
  EXPECT_NEAR(p.flops_bf16, 0.75 * base.peak_flops_bf16, 1e3);  // sustained = the largest bin's rate
  // A compute-bound GEMM: bf16 at its curve, f32 at the f32 curve, or its wave-quantized time (the base's sm_count
  // and tiles are kept) when that is longer.
  partition::PassWork big;
  big.gemms.push_back({4096, 4096, 4096});
  const double flops = 2.0 * 4096 * 4096 * 4096;
  EXPECT_EQ(p.sm_count, base.sm_count);
  for (const bool bf16 : {true, false}) {
    const double peak = bf16 ? base.peak_flops_bf16 : base.peak_flops_f32;
    const double curve = flops / (peak * p.gemm_efficiency_at(flops, bf16));
    EXPECT_NEAR(p.roofline_seconds(big, bf16), std::max(curve, p.gemm_wave_seconds(big.gemms[0], bf16)), 1e-12);
  }
  // Written and read back: the same text, the same curves and timings.
  const std::string path = write("measured.json", profile_to_json(p).dump(2));
  const HardwareProfile back = load_profile(path);
  EXPECT_EQ(profile_to_json(back), profile_to_json(p));
  ASSERT_EQ(back.gemm_efficiency_f32.size(), p.gemm_efficiency_f32.size());
  for (std::size_t i = 0; i < p.gemm_efficiency_f32.size(); ++i) {  // to the file's 9 significant digits
    EXPECT_NEAR(back.gemm_efficiency_f32[i].first / p.gemm_efficiency_f32[i].first, 1.0, 1e-8);
    EXPECT_NEAR(back.gemm_efficiency_f32[i].second / p.gemm_efficiency_f32[i].second, 1.0, 1e-8);
  }
  ASSERT_EQ(back.measured_gemms.size(), 6u);
  EXPECT_EQ(back.measured_gemms[0].what, p.measured_gemms[0].what);
  EXPECT_NEAR(back.measured_gemms[0].seconds, p.measured_gemms[0].seconds, 1e-8 * p.measured_gemms[0].seconds);
  const std::string again = write("again.json", profile_to_json(back).dump(2));
  std::ifstream a(path), b(again);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}), std::string(std::istreambuf_iterator<char>(b), {}));
  // Without f32 timings (a spent budget) f32 keeps the base's assumed curve, not bf16's measured one; without bf16
  // timings there is no profile.
  GemmProfileResult bf16_only;
  for (const GemmTiming& t : r.timings) {
    if (t.dtype == DType::kBF16) bf16_only.timings.push_back(t);
  }
  const HardwareProfile half = measured_gemm_profile(base, bf16_only, 0, "x", "y");
  EXPECT_EQ(half.gemm_efficiency_f32, base.gemm_efficiency);
  EXPECT_NEAR(half.gemm_efficiency_at(1e10, true), 0.75, 1e-9);
  GemmProfileResult nothing;
  nothing.skipped = 468;
  try {
    measured_gemm_profile(base, nothing, 0, "x", "y");
    ADD_FAILURE() << "a profile without a measured GEMM was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no bf16 GEMM was measured (468 skipped by the time budget)"),
              std::string::npos) << e.what();
  }
  // A base without a roofline cannot anchor a measured curve.
  HardwareProfile flat = base;
  flat.gemm_efficiency.clear();
  EXPECT_THROW(measured_gemm_profile(flat, r, 0, "x", "y"), Error);
}

TEST_F(GemmProfile, ThePlannerPricesPlansFromTheMeasuredCurve) {
  const std::string config = write("gpt.json", R"({"model": {"type": "gpt", "vocab_size": 512, "d_model": 256,
      "n_layers": 4, "n_heads": 4, "seq_len": 128}, "batch": {"global_batch_size": 8},
      "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})");
  HardwareProfile base = h100();
  base.memory_bandwidth_Bps = 1e30;  // every GEMM compute-bound and nothing else costs time: the step is GEMM time
  base.kernel_launch_s = 0;          // (launches neither)
  base.intra_node = base.inter_node = Link{1e-30, 1e30};
  GemmProfileResult r;
  for (const auto& [k, fraction] : {std::pair{5, 0.1}, std::pair{500, 0.4}, std::pair{50000, 0.8}}) {
    r.timings.push_back(timing(DType::kBF16, 1000, 1000, k, fraction, base.peak_flops_bf16));
    r.timings.push_back(timing(DType::kF32, 1000, 1000, k, fraction, base.peak_flops_f32));
  }
  const HardwareProfile measured = measured_gemm_profile(base, r, 0, "measured", "synthetic");
  HardwareProfile slow_f32 = measured;
  for (auto& point : slow_f32.gemm_efficiency_f32) point.second /= 2;
  const PlanChoice one{1, 1, 1, 1, "1f1b", 1, 0, partition::Recompute::kNone, 8, false};
  const auto step = [&](const HardwareProfile& p, const std::string& precision) {
    const HardwareProfile read = load_profile(write("p.json", profile_to_json(p).dump()));  // as `plan --profile`
    const PlanEstimate e = estimate_plan(config, {"device.precision=" + precision}, one, read, SearchOptions{1, 0});
    EXPECT_TRUE(e.valid) << e.reason;
    return e.step_s;
  };
  const double fp32 = step(measured, "fp32"), fp32_slow = step(slow_f32, "fp32");
  const double bf16 = step(measured, "bf16"), bf16_after = step(slow_f32, "bf16");
  EXPECT_GT(fp32, 0.0);
  EXPECT_NEAR(fp32_slow / fp32, 2.0, 0.05);  // half the efficiency: twice the GEMM time
  EXPECT_DOUBLE_EQ(bf16_after, bf16);        // bf16 GEMMs read their own curve
  EXPECT_LT(bf16, fp32);                     // 989 against 67 TFLOP/s peaks
}

TEST_F(GemmProfile, BadMeasuredKeysAreRefusedByName) {
  const std::string good = R"({"format": "cleave-hardware-profile", "name": "m", "source": "test",
    "device_type": "cuda", "sustained_gemm_tflops": {"f32": 10, "bf16": 100}, "memory_bandwidth_GBps": 1000,
    "peak_tflops": {"f32": 20, "bf16": 200}, "gemm_efficiency": [[1e8, 0.2], [1e10, 0.8]],
    "gemm_efficiency_f32": [[1e8, 0.3], [1e10, 0.6]],
    "gemm_measured": [{"dtype": "bf16", "what": "fc1 forward", "m": 1024, "n": 3072, "k": 768, "ms": 0.05}],
    "intra_node": {"latency_us": 5, "bandwidth_GBps": 300}, "inter_node": {"latency_us": 10, "bandwidth_GBps": 25},
    "ranks_per_node": 8, "device_memory_GiB": 80})";
  const HardwareProfile p = load_profile(write("good.json", good));
  EXPECT_NEAR(p.gemm_efficiency_at(1e9, false), 0.45, 1e-12);
  EXPECT_NEAR(p.gemm_efficiency_at(1e9, true), 0.5, 1e-12);
  ASSERT_EQ(p.measured_gemms.size(), 1u);
  EXPECT_DOUBLE_EQ(p.measured_gemms[0].seconds, 0.05e-3);
  auto message = [&](const std::string& from, const std::string& to) {
    std::string bad = good;
    const auto at = bad.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    try {
      load_profile(write("bad.json", bad));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string m = message("[[1e8, 0.3], [1e10, 0.6]]", "[[1e10, 0.3], [1e8, 0.6]]");
  EXPECT_NE(m.find("gemm_efficiency_f32 must list GEMM sizes in increasing order"), std::string::npos) << m;
  m = message("[[1e8, 0.3], [1e10, 0.6]]", "[[1e8, 0]]");
  EXPECT_NE(m.find("gemm_efficiency_f32 entry [100000000.0,0] needs flops > 0 and a fraction in (0, 1]"),
            std::string::npos) << m;
  m = message("\"dtype\": \"bf16\"", "\"dtype\": \"f16\"");
  EXPECT_NE(m.find("gemm_measured entry 0: 'dtype' must be \"f32\" or \"bf16\", got \"f16\""), std::string::npos) << m;
  m = message("\"ms\": 0.05", "\"ms\": -1");
  EXPECT_NE(m.find("gemm_measured entry 0: 'ms' must be a number > 0"), std::string::npos) << m;
  m = message("\"peak_tflops\": {\"f32\": 20, \"bf16\": 200}, \"gemm_efficiency\": [[1e8, 0.2], [1e10, 0.8]],", "");
  EXPECT_NE(m.find("'gemm_efficiency_f32' needs 'peak_tflops' and 'gemm_efficiency'"), std::string::npos) << m;
}

}  // namespace
}  // namespace cleave::planner::gemm_profile_test
