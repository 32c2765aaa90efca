// The CPU backend's per-run state at the seam (kernels/ops/cpu/cpu_resources.hpp): make_device_resources(cpu)
// makes it, a run's context carries it, and the GEMMs use it. Asserts, on every built library (oneDNN's state
// checks skipped, saying so, where oneDNN is not built):
//  - ops::gemm through a context with resources gives the bits of a context without (f32 and bf16 operands, bias
//    epilogue, deterministic and fast mode);
//  - the steady state: repeating a step's GEMMs through the run's resources makes no oneDNN primitive and no
//    scratchpad; two runs' resources share nothing;
//  - a context whose resources are another device's is refused, naming the fix.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"

namespace cleave::ops {
namespace {

using cleave::kernels::test::random_floats;

Tensor cast_to(const Context& ctx, const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype, MemoryCategory::kActivations, cpu_allocator());
  copy(ctx, t, out);
  return out;
}

cpu_detail::CpuResources& cpu_state(DeviceResources& resources) {
  return dynamic_cast<cpu_detail::CpuResources&>(resources);
}

// A Linear's three GEMMs (forward with bias, input gradient, weight gradient accumulated with beta 1) in `dtype`;
// their outputs as floats. Large enough to be sliced.
std::vector<std::vector<float>> linear_step(const Context& ctx, DType dtype) {
  const std::int64_t rows = 160, in = 96, out = 144;
  const Tensor x = cast_to(ctx, Tensor::from_floats(random_floats(rows * in, 1), {rows, in}), dtype);
  const Tensor w = cast_to(ctx, Tensor::from_floats(random_floats(out * in, 2), {out, in}), dtype);
  const Tensor b = cast_to(ctx, Tensor::from_floats(random_floats(out, 3), {out}), dtype);
  const Tensor dy = cast_to(ctx, Tensor::from_floats(random_floats(rows * out, 4), {rows, out}), dtype);
  Tensor y = Tensor::empty({rows, out}, dtype, MemoryCategory::kActivations, cpu_allocator());
  Tensor dx = Tensor::empty({rows, in}, dtype, MemoryCategory::kActivations, cpu_allocator());
  Tensor dw = Tensor::from_floats(random_floats(out * in, 5), {out, in});
  GemmOptions fwd;
  fwd.trans_b = true;
  fwd.epilogue = GemmEpilogue::kBias;
  fwd.bias = b;
  gemm(ctx, x, w, y, fwd);
  gemm(ctx, dy, w, dx);
  GemmOptions wgrad;
  wgrad.trans_a = true;
  wgrad.beta = 1.0f;
  gemm(ctx, dy, x, dw, wgrad);
  return {y.to_floats(), dx.to_floats(), dw.to_floats()};
}

class CpuResourcesGemm : public ::testing::TestWithParam<CpuBlas> {};

TEST_P(CpuResourcesGemm, ResourcesChangeNoBit) {
  const CpuBlas blas = GetParam();
  if (!cpu_blas_built(blas)) GTEST_SKIP() << enum_name(blas) << " is not built into this cleave";
  const std::unique_ptr<DeviceResources> resources = make_device_resources(Device::cpu());
  ASSERT_NE(resources, nullptr);
  for (const GemmMode mode : {GemmMode::kFast, GemmMode::kDeterministic}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      Context bare;
      bare.cpu_blas = blas;
      bare.gemm_mode = mode;
      Context run = bare;
      run.resources = resources.get();
      const auto want = linear_step(bare, dtype);
      const auto got = linear_step(run, dtype);
      for (size_t i = 0; i < want.size(); ++i) {
        const std::string what = std::string(enum_name(blas)) + " " + std::string(dtype_name(dtype)) + " GEMM " +
                                 std::to_string(i) + (mode == GemmMode::kDeterministic ? " deterministic" : "");
        EXPECT_GT(kernels::test::l2_norm(got[i]), 0.0) << what;
        EXPECT_TRUE(kernels::test::same_bits(got[i], want[i])) << what << ": the run's resources changed bits";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Libraries, CpuResourcesGemm,
                         ::testing::Values(CpuBlas::kAuto, CpuBlas::kOpenBlas, CpuBlas::kBlis, CpuBlas::kOneDnn),
                         [](const auto& info) { return std::string(enum_name(info.param)); });

TEST(CpuResources, SteadyStateStepsMakeNoPrimitiveOrScratchpad) {
  if (!cpu_blas_built(CpuBlas::kOneDnn)) GTEST_SKIP() << "onednn is not built into this cleave";
  const std::unique_ptr<DeviceResources> resources = make_device_resources(Device::cpu());
  const std::unique_ptr<DeviceResources> other_run = make_device_resources(Device::cpu());
  const kernels::cpu::OneDnnMatmuls& matmuls = cpu_state(*resources).onednn();
  Context ctx;
  ctx.cpu_blas = CpuBlas::kOneDnn;
  ctx.resources = resources.get();
  for (const DType dtype : {DType::kF32, DType::kBF16}) linear_step(ctx, dtype);  // the first step: shapes seen
  const size_t primitives = matmuls.primitives(), scratchpads = matmuls.scratchpads();
  const size_t bytes = matmuls.scratchpad_bytes();
  EXPECT_GE(primitives, 3u);
  for (int step = 0; step < 2; ++step) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) linear_step(ctx, dtype);
  }
  EXPECT_EQ(matmuls.primitives(), primitives) << "a steady-state step made a oneDNN primitive";
  EXPECT_EQ(matmuls.scratchpads(), scratchpads) << "a steady-state step made a scratchpad";
  EXPECT_EQ(matmuls.scratchpad_bytes(), bytes) << "a steady-state step grew the scratchpads";
  EXPECT_EQ(cpu_state(*other_run).onednn().primitives(), 0u) << "another run's resources were touched";
}

TEST(CpuResources, AnotherDevicesResourcesAreRefused) {
  class Foreign final : public DeviceResources {};
  Foreign foreign;
  Context ctx;
  ctx.cpu_blas = CpuBlas::kOneDnn;
  ctx.resources = &foreign;
  const Tensor a = Tensor::from_floats(random_floats(4, 6), {2, 2});
  Tensor c = Tensor::empty({2, 2}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  if (!cpu_blas_built(CpuBlas::kOneDnn)) GTEST_SKIP() << "onednn is not built into this cleave";
  try {
    gemm(ctx, a, a, c);
    FAIL() << "a GEMM ran with another device's resources";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("make_device_resources(cpu)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::ops
