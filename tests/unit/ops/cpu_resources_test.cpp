// The CPU backend's per-run state at the seam (kernels/ops/cpu/cpu_resources.hpp): make_device_resources(cpu)
// makes it, a run's context carries it, and the GEMMs use it. Asserts, on every built library (oneDNN's state
// checks skipped, saying so, where oneDNN is not built):
//  - ops::gemm through a context with resources gives the bits of a context without (f32 and bf16 operands, bias
//    epilogue, deterministic and fast mode);
//  - the steady state: repeating a step's GEMMs through the run's resources makes no oneDNN primitive and no
//    scratchpad; two runs' resources share nothing;
//  - the kernels' scratch (kernels/cpu/kernel_scratch.hpp: the bf16 chunk buffers of the element- and row-wise
//    slots, RoPE's table and rows, cross-entropy's rows and per-row losses): a row step through the run's
//    resources gives the bits of a context without, and repeating it leases the run's scratch (so the buffers are
//    not the call's own) without growing it (so a steady-state step allocates none);
//  - a context whose resources are another device's is refused, naming the fix.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/ops/backend.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"

namespace cleave::ops::cpu_resources_test {
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

// The element-wise, RoPE and cross-entropy ops of a step in `dtype` (the slots that borrow the kernel scratch),
// sized so each runs on the OpenMP team over several chunks; their outputs as floats.
std::vector<std::vector<float>> row_step(const Context& ctx, DType dtype) {
  const std::int64_t batch = 2, seq = 64, q_heads = 4, kv_heads = 2, head_dim = 32, classes = 300;
  const std::int64_t rows = batch * seq;
  auto input = [&](const Shape& shape, std::uint64_t seed) {
    return cast_to(ctx, Tensor::from_floats(random_floats(static_cast<size_t>(shape.numel()), seed), shape), dtype);
  };
  auto output = [&](const Shape& shape, DType type) {
    return Tensor::empty(shape, type, MemoryCategory::kActivations, cpu_allocator());
  };
  const Tensor gate = input({rows, 512}, 11), up = input({rows, 512}, 12);
  Tensor sum = output({rows, 512}, dtype), h = output({rows, 512}, dtype);
  add(ctx, gate, up, sum);
  swiglu_forward(ctx, gate, up, h);
  const Tensor q = input({batch, seq, q_heads * head_dim}, 13), k = input({batch, seq, kv_heads * head_dim}, 14),
               v = input({batch, seq, kv_heads * head_dim}, 15);
  Tensor qkv = output({batch, seq, 3 * q_heads * head_dim}, dtype);
  RopeParams rope;
  rope.q_heads = q_heads;
  rope.kv_heads = kv_heads;
  rope_pack_qkv(ctx, q, k, v, qkv, rope);
  const Tensor logits = input({rows, classes}, 16);
  Tensor targets = output({rows}, DType::kI32);
  for (std::int64_t r = 0; r < rows; ++r) targets.data<std::int32_t>()[r] = r % 7 == 0 ? -1 : (r * 37) % classes;
  Tensor lse = output({rows}, DType::kF32), loss = output({1}, DType::kF32);
  Tensor dloss = Tensor::from_floats(std::vector<float>{1.0f}, {1}), dlogits = output({rows, classes}, dtype);
  cross_entropy_forward(ctx, logits, targets, lse, loss);
  cross_entropy_backward(ctx, logits, targets, lse, dloss, dlogits, VocabRange{0, classes, classes});
  return {sum.to_floats(), h.to_floats(), qkv.to_floats(), lse.to_floats(), loss.to_floats(), dlogits.to_floats()};
}

TEST(CpuResources, KernelScratchChangesNoBit) {
  const std::unique_ptr<DeviceResources> resources = make_device_resources(Device::cpu());
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    Context bare;
    Context run = bare;
    run.resources = resources.get();
    const auto want = row_step(bare, dtype);
    const auto got = row_step(run, dtype);
    for (size_t i = 0; i < want.size(); ++i) {
      const std::string what = std::string(dtype_name(dtype)) + " output " + std::to_string(i);
      EXPECT_GT(kernels::test::l2_norm(got[i]), 0.0) << what;
      EXPECT_TRUE(kernels::test::same_bits(got[i], want[i])) << what << ": the run's kernel scratch changed bits";
    }
  }
}

TEST(CpuResources, SteadyStateStepsLeaseButNeverGrowTheKernelScratch) {
  const std::unique_ptr<DeviceResources> resources = make_device_resources(Device::cpu());
  const std::unique_ptr<DeviceResources> other_run = make_device_resources(Device::cpu());
  const kernels::cpu::KernelScratch& scratch = cpu_state(*resources).scratch();
  Context ctx;
  ctx.resources = resources.get();
  for (const DType dtype : {DType::kF32, DType::kBF16}) row_step(ctx, dtype);  // the first step: shapes seen
  const size_t growths = scratch.growths(), bytes = scratch.bytes(), leases = scratch.leases();
  EXPECT_GE(growths, 1u);
  row_step(ctx, DType::kF32);
  const size_t f32_step = scratch.leases() - leases;
  row_step(ctx, DType::kBF16);
  const size_t bf16_step = scratch.leases() - leases - f32_step;
  // f32: RoPE's table, the forward cross-entropy's losses and its backward; bf16: add and swiglu's chunks too
  EXPECT_GE(f32_step, 3u) << "the f32 step's kernels did not borrow the run's scratch (scratch of their own?)";
  EXPECT_GE(bf16_step, 5u) << "the bf16 step's kernels did not borrow the run's scratch (buffers of their own?)";
  for (int step = 0; step < 2; ++step) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) row_step(ctx, dtype);
  }
  EXPECT_EQ(scratch.leases(), leases + 3 * (f32_step + bf16_step));
  EXPECT_EQ(scratch.growths(), growths) << "a steady-state step allocated kernel scratch";
  EXPECT_EQ(scratch.bytes(), bytes);
  EXPECT_EQ(cpu_state(*other_run).scratch().leases(), 0u) << "another run's scratch was touched";
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
}  // namespace cleave::ops::cpu_resources_test
