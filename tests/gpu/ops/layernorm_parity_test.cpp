// Seam parity of LayerNorm (ops::layernorm_forward / backward_input / backward_weight) on cuda:0 against the CPU
// backend: x, gamma, beta, y, dy and dx in f32 or bf16 (mean, rstd, dgamma, dbeta f32 always), rows of 1, 33, 129
// and 768 columns.
//
// Tolerances (relative to each element plus the tensor's scale, parity_util.hpp):
//  - f32 2e-5: two-pass statistics and the backward's row sums in another order (warp butterflies vs the CPU's
//    loop), a few f32 ulps, amplified once by rstd.
//  - bf16 outputs (y, dx) 8e-3: those ulps may flip the final bf16 rounding (one bf16 ulp, 2^-8 relative).
//  - mean, rstd, dgamma, dbeta are f32 in both cases: 2e-5 (bf16 inputs are widened exactly on both sides);
//    dgamma/dbeta sum up to 300 rows in fixed chunks: 1e-4.
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::layernorm_parity_test {
namespace {

using LayerNormParity = OpsParity;

TEST_F(LayerNormParity, ForwardAndBackwardMatchCpu) {
  constexpr float kEps = 1e-5f;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Shape& shape : {Shape{3, 1}, Shape{7, 33}, Shape{2, 5, 129}, Shape{300, 768}}) {
      const std::string what = shape.str() + " " + std::string(dtype_name(dtype));
      const double tol = dtype == DType::kBF16 ? 8e-3 : 2e-5;
      const std::int64_t rows = shape.rows(), cols = shape.last();
      const Tensor x = random(shape, dtype, -3.0f, 3.0f);
      const Tensor gamma = random(Shape{cols}, dtype, 0.5f, 1.5f), beta = random(Shape{cols}, dtype);
      Tensor y = empty_cpu(shape, dtype), mean = empty_cpu(Shape{rows}, DType::kF32);
      Tensor rstd = empty_cpu(Shape{rows}, DType::kF32);
      ops::layernorm_forward(cpu(), x, gamma, beta, y, mean, rstd, kEps);
      Tensor gpu_y = poisoned_gpu(shape, dtype), gpu_mean = poisoned_gpu(Shape{rows}, DType::kF32);
      Tensor gpu_rstd = poisoned_gpu(Shape{rows}, DType::kF32);
      const Tensor gpu_x = to_gpu(x), gpu_gamma = to_gpu(gamma);
      ops::layernorm_forward(gpu(), gpu_x, gpu_gamma, to_gpu(beta), gpu_y, gpu_mean, gpu_rstd, kEps);
      expect_close(y, gpu_y, tol, "layernorm_forward y " + what);
      expect_close(mean, gpu_mean, 2e-5, "layernorm_forward mean " + what);
      expect_close(rstd, gpu_rstd, 2e-5, "layernorm_forward rstd " + what);

      // Backward from the CPU's statistics on both sides.
      const Tensor dy = random(shape, dtype);
      const Tensor gpu_dy = to_gpu(dy), gpu_mean_ref = to_gpu(mean), gpu_rstd_ref = to_gpu(rstd);
      if (cols > 1) {  // one column: dx is exactly 0 (x - mean = 0), which expect_close refuses
        Tensor dx = empty_cpu(shape, dtype);
        ops::layernorm_backward_input(cpu(), dy, x, gamma, mean, rstd, dx);
        Tensor gpu_dx = poisoned_gpu(shape, dtype);
        ops::layernorm_backward_input(gpu(), gpu_dy, gpu_x, gpu_gamma, gpu_mean_ref, gpu_rstd_ref, gpu_dx);
        expect_close(dx, gpu_dx, tol, "layernorm_backward_input " + what);
      }
      Tensor dgamma = random(Shape{cols}, DType::kF32), dbeta = random(Shape{cols}, DType::kF32);  // +=
      Tensor gpu_dgamma = to_gpu(dgamma), gpu_dbeta = to_gpu(dbeta);
      ops::layernorm_backward_weight(cpu(), dy, x, mean, rstd, dgamma, dbeta);
      ops::layernorm_backward_weight(gpu(), gpu_dy, gpu_x, gpu_mean_ref, gpu_rstd_ref, gpu_dgamma, gpu_dbeta);
      expect_close(dgamma, gpu_dgamma, 1e-4, "layernorm_backward_weight dgamma " + what);
      expect_close(dbeta, gpu_dbeta, 1e-4, "layernorm_backward_weight dbeta " + what);
    }
  }
}

}  // namespace
}  // namespace cleave::testing::layernorm_parity_test
