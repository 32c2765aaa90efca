// `cleave profile --gemm`'s measuring path on cuda:0 (engine/planner/gemm_profile.hpp; label gpu, binary
// gpu_ops_test; compiled, not run on a GPU). Asserts: (1) every GEMM of the short list (awkward small blocks and a
// GPT-2 124M block at 1024 tokens), in bf16 (f32 accumulation) and f32 (TF32 off), is timed by device events and
// passes its check against the double reference at 48 elements; (2) the event times are consistent with the host
// clock: the timed launches add up to no more than the wall time of the whole measurement; (3) tensor cores are
// used: the bf16 fc1 forward of the 124M block is at least twice as fast as the f32 one (SIMT) and above
// 20 TFLOP/s; (4) the curves fitted against generous peaks lie in (0, 1], and the profile made from them writes
// and reads back through the planner's reader.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/planner/gemm_profile.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::gemm_profile_gpu_test {
namespace {

class GemmProfileGpu : public OpsParity {};

TEST_F(GemmProfileGpu, MeasuresAndChecksTheTrainingGemms) {
  const std::vector<planner::TrainingGemm> gemms = planner::training_gemms(/*small=*/true);
  planner::GemmTimingOptions options;
  options.samples = 3;
  options.seed = seed_;
  const planner::GemmProfileResult r = planner::measure_gemms(gpu(), gemms, {DType::kBF16, DType::kF32}, options);
  ASSERT_EQ(r.timings.size(), 2 * gemms.size());
  double timed = 0;
  const planner::GemmTiming* fc1[2] = {nullptr, nullptr};
  for (const planner::GemmTiming& t : r.timings) {
    EXPECT_GT(t.seconds, 0.0) << t.gemm.what;
    EXPECT_EQ(t.checked, 48) << t.gemm.what;
    timed += t.seconds * t.launches * options.samples;
    if (t.gemm.what == "fc1 forward d768 ff3072 tokens 1024") fc1[t.dtype == DType::kBF16 ? 0 : 1] = &t;
  }
  EXPECT_LE(timed, r.seconds);
  ASSERT_TRUE(fc1[0] != nullptr && fc1[1] != nullptr);
  const double bf16_rate = fc1[0]->gemm.flops() / fc1[0]->seconds, f32_rate = fc1[1]->gemm.flops() / fc1[1]->seconds;
  std::printf("[ gpu ] fc1 forward d768 ff3072 tokens 1024: bf16 %.1f TFLOP/s, f32 %.1f TFLOP/s\n", bf16_rate / 1e12,
              f32_rate / 1e12);
  EXPECT_GT(bf16_rate, 2.0 * f32_rate);
  EXPECT_GT(bf16_rate, 20e12);

  planner::HardwareProfile base;
  base.name = "generous peaks";
  base.source = "test";
  base.device_type = DeviceType::kCuda;
  base.flops_f32 = 50e12;
  base.flops_bf16 = 500e12;
  base.peak_flops_f32 = 200e12;   // above any GPU's f32 (non-tensor) rate today
  base.peak_flops_bf16 = 5000e12;  // and its dense bf16 rate
  base.gemm_efficiency = {{1e9, 0.5}};
  base.memory_bandwidth_Bps = 3e12;
  base.intra_node = base.inter_node = planner::Link{1e-5, 1e11};
  base.ranks_per_node = 8;
  base.device_memory = 80LL << 30;
  const planner::HardwareProfile p = planner::measured_gemm_profile(base, r, 0, "cuda:0 (test)", "gemm_profile_gpu_test");
  for (const auto* curve : {&p.gemm_efficiency, &p.gemm_efficiency_f32}) {
    ASSERT_FALSE(curve->empty());
    for (const auto& [flops, fraction] : *curve) {
      EXPECT_GT(fraction, 0.0) << flops;
      EXPECT_LE(fraction, 1.0) << flops;
    }
  }
  const std::string path = (std::filesystem::temp_directory_path() / ("cleave_gemm_profile_gpu_" +
                                                                       std::to_string(seed_) + ".json")).string();
  std::ofstream(path) << planner::profile_to_json(p).dump(2);
  const planner::HardwareProfile back = planner::load_profile(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.measured_gemms.size(), r.timings.size());
  EXPECT_EQ(back.gemm_efficiency.size(), p.gemm_efficiency.size());
}

}  // namespace
}  // namespace cleave::testing::gemm_profile_gpu_test
