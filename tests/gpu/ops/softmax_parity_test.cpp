// Seam parity of the row softmax (ops::softmax_forward / softmax_backward) on cuda:0 against the CPU backend, f32
// and bf16, on rows of 1, 33, 129 and 1000 columns (one warp per row: below, at and far above 32 lanes).
//
// Tolerances (relative to each element plus the tensor's scale, parity_util.hpp): f32 1e-5 (expf vs the CPU's
// exp and the row sums in another order: a few f32 ulps); bf16 8e-3 (the f32 results differ by those ulps, which
// may flip the final bf16 rounding: one bf16 ulp, 2^-8 relative, either way).
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::softmax_parity_test {
namespace {

using SoftmaxParity = OpsParity;

TEST_F(SoftmaxParity, ForwardAndBackwardMatchCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Shape& shape : {Shape{3, 1}, Shape{7, 33}, Shape{2, 5, 129}, Shape{4, 1000}}) {
      const std::string what = shape.str() + " " + std::string(dtype_name(dtype));
      const double tol = dtype == DType::kBF16 ? 8e-3 : 1e-5;
      const Tensor x = random(shape, dtype, -5.0f, 5.0f);
      Tensor y = empty_cpu(shape, dtype);
      ops::softmax_forward(cpu(), x, y);
      Tensor gpu_y = poisoned_gpu(shape, dtype);
      ops::softmax_forward(gpu(), to_gpu(x), gpu_y);
      expect_close(y, gpu_y, tol, "softmax_forward " + what);

      // Backward from the CPU's y on both sides, so only the backward is compared.
      const Tensor dy = random(shape, dtype);
      Tensor dx = empty_cpu(shape, dtype);
      ops::softmax_backward(cpu(), y, dy, dx);
      Tensor gpu_dx = poisoned_gpu(shape, dtype);
      ops::softmax_backward(gpu(), to_gpu(y), to_gpu(dy), gpu_dx);
      if (shape.last() == 1) {
        // One column: y = 1 and dx = 0 exactly on both backends (expect_close refuses an all-zero reference).
        std::int64_t nonzero = 0;
        for (float v : to_cpu(gpu_dx).to_floats()) nonzero += v != 0.0f;
        EXPECT_EQ(nonzero, 0) << "softmax_backward " << what;
        continue;
      }
      expect_close(dx, gpu_dx, tol, "softmax_backward " + what);
    }
  }
}

}  // namespace
}  // namespace cleave::testing::softmax_parity_test
