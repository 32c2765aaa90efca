// ops::add_rmsnorm_forward / add_rmsnorm_backward_input on the CPU backend: the same bits as the unfused pair the
// Llama block ran before (add_inplace, then rmsnorm_forward; rmsnorm_backward_input, then add_inplace) in f32, in
// bf16 (the pair's bf16 intermediate r / dx rounded before it is read) and with mixed f32/bf16 operands, on shapes
// that are one element, rows 1 / 17 / 130 by widths 6 / 64 / 96, rows that do not divide the bf16 chunk and a
// parallel one, at 1 and 2 threads; in place as the block calls them (r over the branch, dx over a copy of dy).
// The weight gradient of the fused forward is rmsnorm_backward_weight over r. Argument errors name the op.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::add_rmsnorm_ops_test {
namespace {

using cleave::kernels::test::random_floats;
using test::like;
using test::message_of;
using test::tensor_of;

Tensor clone(const Tensor& t) {
  Tensor out = like(t, t.dtype());
  copy(Context{}, t, out);
  return out;
}

// The same dtype and the same bits, element for element, and not all zero.
void expect_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  test::expect_same_floats(got.to_floats(), want.to_floats(), what);
}

struct Case {
  std::int64_t rows, cols;
};
const Case kCases[] = {{1, 1},  {1, 6},   {1, 64},  {1, 96},   {17, 6},  {17, 64},
                       {17, 96}, {130, 6}, {130, 64}, {130, 96}, {37, 29}, {301, 129}};

// Dtypes of (branch = r, residual, weight, out/dx): the block's f32 and bf16 runs, and mixes.
struct Dtypes {
  DType branch, residual, weight, out;
};
const Dtypes kDtypes[] = {{DType::kF32, DType::kF32, DType::kF32, DType::kF32},
                          {DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16},
                          {DType::kBF16, DType::kF32, DType::kF32, DType::kBF16},
                          {DType::kF32, DType::kBF16, DType::kBF16, DType::kF32}};

class OpsAddRmsNorm : public test::CpuThreadsTest {};

TEST_P(OpsAddRmsNorm, FusedIsTheUnfusedPairBitForBit) {
  constexpr float kEps = 1e-6f;
  std::uint64_t seed = 40;
  for (const Dtypes& dt : kDtypes) {
    for (const Case& c : kCases) {
      const std::string at = " [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] " +
                             std::string(dtype_name(dt.branch)) + "/" + std::string(dtype_name(dt.residual)) + "/" +
                             std::string(dtype_name(dt.out));
      const Shape shape{c.rows, c.cols};
      const std::size_t n = static_cast<std::size_t>(c.rows * c.cols);
      const Tensor branch = tensor_of(random_floats(n, ++seed, 2.0f), shape, dt.branch);
      const Tensor residual = tensor_of(random_floats(n, ++seed, 1.5f), shape, dt.residual);
      const Tensor weight =
          tensor_of(random_floats(static_cast<std::size_t>(c.cols), ++seed), Shape{c.cols}, dt.weight);
      const Tensor dout = tensor_of(random_floats(n, ++seed), shape, dt.out);
      const Tensor dres = tensor_of(random_floats(n, ++seed), shape, dt.out);

      // Unfused, as the block ran: x1 = branch; x1 += residual; norm(x1). dx = norm'(dout); dx += dres.
      Tensor r_pair = clone(branch), out_pair = like(branch, dt.out);
      Tensor rstd_pair = Tensor::empty(Shape{c.rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
      add_inplace(ctx_, r_pair, residual);
      rmsnorm_forward(ctx_, r_pair, weight, out_pair, rstd_pair, kEps);
      Tensor dx_pair = like(r_pair, dt.out);
      rmsnorm_backward_input(ctx_, dout, r_pair, weight, rstd_pair, dx_pair);
      add_inplace(ctx_, dx_pair, dres);

      // Fused, in place: r over the branch, dx over a copy of dres.
      Tensor r = clone(branch), out = like(branch, dt.out);
      Tensor rstd = Tensor::empty(Shape{c.rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
      add_rmsnorm_forward(ctx_, r, residual, weight, r, out, rstd, kEps);
      expect_bits(r, r_pair, "r" + at);
      expect_bits(out, out_pair, "out" + at);
      expect_bits(rstd, rstd_pair, "rstd" + at);
      Tensor dx = clone(dres);
      add_rmsnorm_backward_input(ctx_, dout, dx, r, weight, rstd, dx);
      expect_bits(dx, dx_pair, "dx (over dres)" + at);
      Tensor dx_apart = like(r, dt.out);  // and into its own tensor
      add_rmsnorm_backward_input(ctx_, dout, dres, r, weight, rstd, dx_apart);
      expect_bits(dx_apart, dx_pair, "dx" + at);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, OpsAddRmsNorm, ::testing::Values(1, 2));

TEST(OpsAddRmsNormChecks, ArgumentErrorsNameTheOp) {
  const Context ctx;
  const Shape shape{3, 8};
  const Tensor x = tensor_of(random_floats(24, 1), shape, DType::kF32);
  const Tensor y = tensor_of(random_floats(24, 2), shape, DType::kF32);
  const Tensor w = tensor_of(random_floats(8, 3), Shape{8}, DType::kF32);
  Tensor r = like(x, DType::kF32), out = like(x, DType::kF32);
  Tensor rstd = Tensor::empty(Shape{3}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  std::string msg = message_of([&] { add_rmsnorm_forward(ctx, x, y, w, r, r, rstd, 1e-5f); });
  EXPECT_NE(msg.find("add_rmsnorm_forward: out must not alias"), std::string::npos) << msg;
  const Tensor w_bad = tensor_of(random_floats(7, 3), Shape{7}, DType::kF32);
  msg = message_of([&] { add_rmsnorm_forward(ctx, x, y, w_bad, r, out, rstd, 1e-5f); });
  EXPECT_NE(msg.find("add_rmsnorm_forward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weight"), std::string::npos) << msg;
  msg = message_of([&] { add_rmsnorm_backward_input(ctx, x, y, r, w, rstd, r); });
  EXPECT_NE(msg.find("add_rmsnorm_backward_input: dr may alias dresidual, never dout or r"), std::string::npos) << msg;
}

}  // namespace
}  // namespace cleave::ops::add_rmsnorm_ops_test
