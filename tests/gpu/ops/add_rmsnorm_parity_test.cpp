// Seam parity of the fused residual add + RMSNorm (ops::add_rmsnorm_forward / add_rmsnorm_backward_input) on
// cuda:0: bit for bit the unfused pair on the GPU (add_inplace, then rmsnorm_forward; rmsnorm_backward_input, then
// add_inplace: tolerance 0), in place as the Llama block calls them, and close to the CPU backend's fused op with
// the tolerances of llama_parity_test.cpp (f32 2e-5 for the other warp-sum order; bf16 8e-3, one bf16 ulp).
// Shapes: rows 1 / 17 / 130 by widths 6 / 64 / 96, rows not a multiple of a block's 8, a width past 4096. Mixed
// dtypes (each tensor its own, as the seam allows): a bf16 branch into an f32 residual stream and the other way
// round, out of place, the same checks. Skips without a device (parity_util.hpp).
#include <vector>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::add_rmsnorm_parity_test {
namespace {

using AddRmsNormParity = OpsParity;

TEST_F(AddRmsNormParity, FusedIsTheGpuPairAndCloseToTheCpu) {
  constexpr float kEps = 1e-6f;
  const Shape shapes[] = {Shape{1, 6},  Shape{1, 64},  Shape{1, 96},   Shape{17, 6},  Shape{17, 64},
                          Shape{17, 96}, Shape{130, 6}, Shape{130, 64}, Shape{130, 96}, Shape{9, 4097}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Shape& shape : shapes) {
      const std::string what = shape.str() + " " + std::string(dtype_name(dtype));
      const double tol = dtype == DType::kBF16 ? 8e-3 : 2e-5;
      const std::int64_t rows = shape.rows(), cols = shape.last();
      const Tensor branch = random(shape, dtype, -3.0f, 3.0f), residual = random(shape, dtype, -2.0f, 2.0f);
      const Tensor weight = random(Shape{cols}, dtype, 0.5f, 1.5f);
      const Tensor dout = random(shape, dtype), dres = random(shape, dtype);

      // CPU fused (its bits are the CPU pair's: tests/unit/ops/add_rmsnorm_ops_test.cpp).
      Tensor r = empty_cpu(shape, dtype), out = empty_cpu(shape, dtype), rstd = empty_cpu(Shape{rows}, DType::kF32);
      ops::add_rmsnorm_forward(cpu(), branch, residual, weight, r, out, rstd, kEps);
      Tensor dx = empty_cpu(shape, dtype);
      ops::add_rmsnorm_backward_input(cpu(), dout, dres, r, weight, rstd, dx);

      const Tensor g_residual = to_gpu(residual), g_weight = to_gpu(weight), g_dout = to_gpu(dout);
      // GPU pair.
      Tensor p_r = to_gpu(branch), p_out = poisoned_gpu(shape, dtype), p_rstd = poisoned_gpu(Shape{rows}, DType::kF32);
      ops::add_inplace(gpu(), p_r, g_residual);
      ops::rmsnorm_forward(gpu(), p_r, g_weight, p_out, p_rstd, kEps);
      Tensor p_dx = poisoned_gpu(shape, dtype);
      ops::rmsnorm_backward_input(gpu(), g_dout, p_r, g_weight, p_rstd, p_dx);
      ops::add_inplace(gpu(), p_dx, to_gpu(dres));
      // GPU fused, in place: r over the branch, dx over dres.
      Tensor f_r = to_gpu(branch), f_out = poisoned_gpu(shape, dtype), f_rstd = poisoned_gpu(Shape{rows}, DType::kF32);
      ops::add_rmsnorm_forward(gpu(), f_r, g_residual, g_weight, f_r, f_out, f_rstd, kEps);
      Tensor f_dx = to_gpu(dres);
      ops::add_rmsnorm_backward_input(gpu(), g_dout, f_dx, f_r, g_weight, f_rstd, f_dx);

      expect_close(to_cpu(p_r), f_r, 0.0, "r: fused vs pair " + what);
      expect_close(to_cpu(p_out), f_out, 0.0, "out: fused vs pair " + what);
      expect_close(to_cpu(p_rstd), f_rstd, 0.0, "rstd: fused vs pair " + what);
      expect_close(to_cpu(p_dx), f_dx, 0.0, "dx: fused vs pair " + what);
      expect_close(r, f_r, 0.0, "r vs cpu " + what);  // one addition: the same on both
      expect_close(out, f_out, tol, "out vs cpu " + what);
      expect_close(rstd, f_rstd, 2e-5, "rstd vs cpu " + what);
      expect_close(dx, f_dx, dtype == DType::kBF16 ? 8e-3 : 1e-4, "dx vs cpu " + what);
    }
  }
}

// Mixed dtypes: the kernels read and write each operand in its own type (Floats views), so the fused ops must still
// be the GPU pair's bits and close to the CPU's fused ops. First a bf16 branch, weight and output into an f32
// residual stream with f32 gradients of it; then an f32 branch into a bf16 stream (r rounds the sum to bf16 before
// the norm reads it) with bf16 gradients.
TEST_F(AddRmsNormParity, MixedDtypesAreThePairsBitsAndCloseToTheCpu) {
  constexpr float kEps = 1e-6f;
  constexpr DType f32 = DType::kF32, bf16 = DType::kBF16;
  struct Mix {
    DType x, y, r, weight, out, dout, dres, dr;
  };
  const Mix mixes[] = {{bf16, f32, f32, bf16, bf16, bf16, f32, f32}, {f32, bf16, bf16, f32, f32, f32, bf16, bf16}};
  const Shape shape{37, 96};
  const std::int64_t rows = shape.rows(), cols = shape.last();
  for (const Mix& m : mixes) {
    const std::string what = std::string("x ") + std::string(dtype_name(m.x)) + " r " + std::string(dtype_name(m.r)) +
                             " dr " + std::string(dtype_name(m.dr));
    const auto tol = [](DType t, double f32_tol) { return t == DType::kBF16 ? 8e-3 : f32_tol; };
    const Tensor branch = random(shape, m.x, -3.0f, 3.0f), residual = random(shape, m.y, -2.0f, 2.0f);
    const Tensor weight = random(Shape{cols}, m.weight, 0.5f, 1.5f);
    const Tensor dout = random(shape, m.dout), dres = random(shape, m.dres);

    Tensor r = empty_cpu(shape, m.r), out = empty_cpu(shape, m.out), rstd = empty_cpu(Shape{rows}, DType::kF32);
    ops::add_rmsnorm_forward(cpu(), branch, residual, weight, r, out, rstd, kEps);
    Tensor dx = empty_cpu(shape, m.dr);
    ops::add_rmsnorm_backward_input(cpu(), dout, dres, r, weight, rstd, dx);

    const Tensor g_branch = to_gpu(branch), g_residual = to_gpu(residual), g_weight = to_gpu(weight);
    const Tensor g_dout = to_gpu(dout), g_dres = to_gpu(dres);
    Tensor p_r = poisoned_gpu(shape, m.r), p_out = poisoned_gpu(shape, m.out);
    Tensor p_rstd = poisoned_gpu(Shape{rows}, DType::kF32), p_dx = poisoned_gpu(shape, m.dr);
    ops::add(gpu(), g_branch, g_residual, p_r);
    ops::rmsnorm_forward(gpu(), p_r, g_weight, p_out, p_rstd, kEps);
    ops::rmsnorm_backward_input(gpu(), g_dout, p_r, g_weight, p_rstd, p_dx);
    ops::add_inplace(gpu(), p_dx, g_dres);
    Tensor f_r = poisoned_gpu(shape, m.r), f_out = poisoned_gpu(shape, m.out);
    Tensor f_rstd = poisoned_gpu(Shape{rows}, DType::kF32), f_dx = poisoned_gpu(shape, m.dr);
    ops::add_rmsnorm_forward(gpu(), g_branch, g_residual, g_weight, f_r, f_out, f_rstd, kEps);
    ops::add_rmsnorm_backward_input(gpu(), g_dout, g_dres, f_r, g_weight, f_rstd, f_dx);

    expect_close(to_cpu(p_r), f_r, 0.0, "r: fused vs pair " + what);
    expect_close(to_cpu(p_out), f_out, 0.0, "out: fused vs pair " + what);
    expect_close(to_cpu(p_rstd), f_rstd, 0.0, "rstd: fused vs pair " + what);
    expect_close(to_cpu(p_dx), f_dx, 0.0, "dx: fused vs pair " + what);
    expect_close(r, f_r, 0.0, "r vs cpu " + what);  // one addition, one rounding: the same on both
    expect_close(out, f_out, tol(m.out, 2e-5), "out vs cpu " + what);
    expect_close(rstd, f_rstd, 2e-5, "rstd vs cpu " + what);
    expect_close(dx, f_dx, tol(m.dr, 1e-4), "dx vs cpu " + what);
  }
}

}  // namespace
}  // namespace cleave::testing::add_rmsnorm_parity_test
