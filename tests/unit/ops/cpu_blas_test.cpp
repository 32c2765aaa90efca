// device.blas at the seam: "auto" resolves by the recorded facts (never to a library that is not built), and
// ops::gemm on each built library matches the widened f32 GEMM of the same rounded operands, bf16 operands
// included (bias epilogue, bf16 C, f32 C accumulated with beta = 1), with bits independent of the thread count
// in deterministic mode. What the reports say per dtype (describe_cpu_gemms, cpu_gemm_description) reads the same
// rule. Libraries this build lacks are skipped, saying so; nothing depends on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"

namespace cleave::ops::cpu_blas_test {
namespace {

using cleave::kernels::test::random_floats;

TEST(CpuBlasChoice, AutoFollowsTheRecordedFacts) {
  const CpuBlasFacts none{false, false, false};
  const CpuBlasFacts onednn_emulated{true, true, false};
  const CpuBlasFacts onednn_bf16{true, true, true};
  const CpuGemmChoice openblas{CpuBlas::kOpenBlas, false};
  const CpuGemmChoice onednn_f32{CpuBlas::kOneDnn, false};
  const CpuGemmChoice onednn_bf16_kernels{CpuBlas::kOneDnn, true};
  // auto: oneDNN when built, bf16 kernels only on bf16 instructions.
  for (const bool bf16 : {false, true}) {
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kAuto, bf16, none), openblas);
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kAuto, bf16, onednn_emulated), onednn_f32);
  }
  EXPECT_EQ(choose_cpu_gemm(CpuBlas::kAuto, false, onednn_bf16), onednn_f32);
  EXPECT_EQ(choose_cpu_gemm(CpuBlas::kAuto, true, onednn_bf16), onednn_bf16_kernels);
  // An explicit choice is kept when built; only oneDNN has bf16 kernels.
  for (const bool bf16 : {false, true}) {
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kOpenBlas, bf16, onednn_bf16), openblas);
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kBlis, bf16, onednn_bf16), (CpuGemmChoice{CpuBlas::kBlis, false}));
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kOneDnn, bf16, onednn_emulated), onednn_f32);
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kOneDnn, bf16, onednn_bf16), (CpuGemmChoice{CpuBlas::kOneDnn, bf16}));
    // Not built: OpenBLAS (the config reader refuses the request first).
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kBlis, bf16, none), openblas);
    EXPECT_EQ(choose_cpu_gemm(CpuBlas::kOneDnn, bf16, none), openblas);
  }
}

// Per dtype, as the reports say it: the same rule (choose_cpu_gemm for each dtype), worded by describe_cpu_gemms.
TEST(CpuBlasChoice, PerDtypeChoicesAndTheirWordsFollowTheRecordedFacts) {
  const CpuBlasFacts none{false, false, false};
  const CpuBlasFacts onednn_emulated{true, true, false};
  const CpuBlasFacts onednn_bf16{true, true, true};
  for (const CpuBlasFacts& facts : {none, onednn_emulated, onednn_bf16}) {
    for (const CpuBlas blas : {CpuBlas::kAuto, CpuBlas::kOpenBlas, CpuBlas::kBlis, CpuBlas::kOneDnn}) {
      const CpuGemmChoices c = choose_cpu_gemms(blas, facts);
      EXPECT_EQ(c.requested, blas);
      EXPECT_EQ(c.f32, choose_cpu_gemm(blas, false, facts));
      EXPECT_EQ(c.bf16, choose_cpu_gemm(blas, true, facts));
      EXPECT_EQ(cpu_gemm_libraries(c), std::vector<CpuBlas>{c.f32.library});  // one library for both dtypes today
    }
  }
  EXPECT_EQ(describe_cpu_gemms(choose_cpu_gemms(CpuBlas::kAuto, onednn_bf16)),
            "f32 onednn, bf16 onednn on bf16 kernels (device.blas auto)");
  EXPECT_EQ(describe_cpu_gemms(choose_cpu_gemms(CpuBlas::kAuto, onednn_emulated)),
            "f32 onednn, bf16 onednn widened to f32 (device.blas auto)");
  EXPECT_EQ(describe_cpu_gemms(choose_cpu_gemms(CpuBlas::kAuto, none)),
            "f32 openblas, bf16 openblas widened to f32 (device.blas auto)");
  EXPECT_EQ(describe_cpu_gemms(choose_cpu_gemms(CpuBlas::kOpenBlas, onednn_bf16)),
            "f32 openblas, bf16 openblas widened to f32 (device.blas openblas)");
  EXPECT_EQ(describe_cpu_gemms(choose_cpu_gemms(CpuBlas::kBlis, onednn_bf16)),
            "f32 blis, bf16 blis widened to f32 (device.blas blis)");
  EXPECT_EQ(describe_cpu_gemms(choose_cpu_gemms(CpuBlas::kOneDnn, onednn_bf16)),
            "f32 onednn, bf16 onednn on bf16 kernels (device.blas onednn)");
  // Two libraries (not a choice the rule makes today) are each named once, f32's first.
  const CpuGemmChoices mixed{CpuBlas::kAuto, {CpuBlas::kOpenBlas, false}, {CpuBlas::kOneDnn, true}};
  EXPECT_EQ(cpu_gemm_libraries(mixed), (std::vector<CpuBlas>{CpuBlas::kOpenBlas, CpuBlas::kOneDnn}));
  EXPECT_EQ(describe_cpu_gemms(mixed), "f32 openblas, bf16 onednn on bf16 kernels (device.blas auto)");
}

// This process's description reads the same decision (resolved_cpu_gemm per dtype) and names each library's own
// line; whatever the CPU, the key changes it.
TEST(CpuBlasChoice, DescriptionReadsTheResolvedChoices) {
  for (const CpuBlas blas : {CpuBlas::kAuto, CpuBlas::kOpenBlas, CpuBlas::kBlis, CpuBlas::kOneDnn}) {
    if (!cpu_blas_built(blas)) continue;
    const CpuGemmChoices c = resolved_cpu_gemms(blas);
    EXPECT_EQ(c.f32, resolved_cpu_gemm(blas, false));
    EXPECT_EQ(c.bf16, resolved_cpu_gemm(blas, true));
    const std::string text = cpu_gemm_description(blas);
    EXPECT_EQ(text.rfind(describe_cpu_gemms(c) + ": ", 0), 0u) << text;
    EXPECT_GT(text.size(), describe_cpu_gemms(c).size() + 2) << text;  // a library line follows
  }
  EXPECT_NE(cpu_gemm_description(CpuBlas::kAuto), cpu_gemm_description(CpuBlas::kOpenBlas));
}

Tensor cast_to(const Context& ctx, const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype, MemoryCategory::kActivations, cpu_allocator());
  copy(ctx, t, out);
  return out;
}

class CpuBlasGemm : public ::testing::TestWithParam<CpuBlas> {};

// y = x W^T + b (bf16 C) and dW += dy^T x (f32 C, beta = 1), as a bf16 training step makes them.
TEST_P(CpuBlasGemm, MatchesTheWidenedF32GemmOfTheRoundedOperands) {
  const CpuBlas blas = GetParam();
  if (!cpu_blas_built(blas)) GTEST_SKIP() << enum_name(blas) << " is not built into this cleave";
  Context ref_ctx;  // the widened f32 GEMM on OpenBLAS
  ref_ctx.cpu_blas = CpuBlas::kOpenBlas;
  Context ctx;
  ctx.cpu_blas = blas;
  const std::int64_t rows = 67, in = 45, out = 83;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor x = cast_to(ctx, Tensor::from_floats(random_floats(rows * in, 1), {rows, in}), dtype);
    const Tensor w = cast_to(ctx, Tensor::from_floats(random_floats(out * in, 2), {out, in}), dtype);
    const Tensor b = cast_to(ctx, Tensor::from_floats(random_floats(out, 3), {out}), dtype);
    const Tensor dy = cast_to(ctx, Tensor::from_floats(random_floats(rows * out, 4), {rows, out}), dtype);
    const std::string what = std::string(enum_name(blas)) + " " + std::string(dtype_name(dtype));
    // Forward with bias epilogue, C in the operands' dtype.
    GemmOptions fwd;
    fwd.trans_b = true;
    fwd.epilogue = GemmEpilogue::kBias;
    fwd.bias = b;
    Tensor y = Tensor::empty({rows, out}, dtype, MemoryCategory::kActivations, cpu_allocator());
    gemm(ctx, x, w, y, fwd);
    GemmOptions fwd_ref = fwd;
    fwd_ref.bias = cast_to(ref_ctx, b, DType::kF32);
    Tensor y_ref = Tensor::empty({rows, out}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    gemm(ref_ctx, cast_to(ref_ctx, x, DType::kF32), cast_to(ref_ctx, w, DType::kF32), y_ref, fwd_ref);
    // f32 accumulation either way; a bf16 C is one rounding (2^-8 relative) from its f32 value.
    kernels::test::expect_close(y.to_floats(), y_ref.to_floats(), 1e-4, dtype == DType::kBF16 ? 1.0 / 128 : 1e-5,
                                what + " forward");
    // Weight gradient accumulated into f32.
    GemmOptions wgrad;
    wgrad.trans_a = true;
    wgrad.beta = 1.0f;
    const auto dw0 = random_floats(out * in, 5);
    Tensor dw = Tensor::from_floats(dw0, {out, in});
    Tensor dw_ref = Tensor::from_floats(dw0, {out, in});
    gemm(ctx, dy, x, dw, wgrad);
    gemm(ref_ctx, cast_to(ref_ctx, dy, DType::kF32), cast_to(ref_ctx, x, DType::kF32), dw_ref, wgrad);
    kernels::test::expect_close(dw.to_floats(), dw_ref.to_floats(), 1e-4, 1e-5, what + " weight gradient");
    EXPECT_GT(kernels::test::l2_norm(dw.to_floats()), 0.0);
  }
}

// Deterministic mode: the same GEMM at 1 and 2 threads gives the same bits (f32 and bf16 operands), on a shape
// the sliced path cuts (above 2^20 multiply-adds).
TEST_P(CpuBlasGemm, DeterministicModeIsIndependentOfTheThreadCount) {
  const CpuBlas blas = GetParam();
  if (!cpu_blas_built(blas)) GTEST_SKIP() << enum_name(blas) << " is not built into this cleave";
  const int saved = cpu_threads();
  Context ctx;
  ctx.cpu_blas = blas;
  ctx.gemm_mode = GemmMode::kDeterministic;
  const std::int64_t rows = 300, in = 129, out = 257;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor x = cast_to(ctx, Tensor::from_floats(random_floats(rows * in, 7), {rows, in}), dtype);
    const Tensor w = cast_to(ctx, Tensor::from_floats(random_floats(out * in, 8), {out, in}), dtype);
    GemmOptions fwd;
    fwd.trans_b = true;
    std::vector<std::vector<float>> runs;
    for (const int threads : {1, 2}) {
      configure_cpu_threads(threads);
      Tensor y = Tensor::empty({rows, out}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
      gemm(ctx, x, w, y, fwd);
      runs.push_back(y.to_floats());
    }
    configure_cpu_threads(saved);
    EXPECT_GT(kernels::test::l2_norm(runs[0]), 0.0);
    EXPECT_EQ(runs[0], runs[1]) << enum_name(blas) << " " << dtype_name(dtype)
                                << ": deterministic GEMM differs between 1 and 2 threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Libraries, CpuBlasGemm,
                         ::testing::Values(CpuBlas::kAuto, CpuBlas::kOpenBlas, CpuBlas::kBlis, CpuBlas::kOneDnn),
                         [](const auto& info) { return std::string(enum_name(info.param)); });

}  // namespace
}  // namespace cleave::ops::cpu_blas_test
