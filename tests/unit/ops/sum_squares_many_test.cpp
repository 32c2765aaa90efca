// ops::sum_squares_many on the CPU: the gradient norm's one-call reduction must give exactly the bits of the
// loop it replaced (total += ops::sum_squares(x), in order), for f32 and bf16 tensors, sizes across the
// kernel's 65,536-element chunks; an empty list is 0; a tensor on another device is refused by name.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::sum_squares_many_test {
namespace {

TEST(OpsSumSquaresMany, EqualsTheOrderedLoopBitForBit) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  const Context ctx;
  std::vector<Tensor> xs;
  for (std::int64_t n : {1, 7, 65536, 65537, 200003}) {
    std::vector<float> values(static_cast<std::size_t>(n));
    for (float& v : values) v = dist(rng);
    xs.push_back(Tensor::from_floats(values, Shape{n}));
  }
  std::vector<float> wide(1001);
  for (float& v : wide) v = dist(rng);
  Tensor bf16 = Tensor::empty({1001}, DType::kBF16, MemoryCategory::kActivations, cpu_allocator());
  copy(ctx, Tensor::from_floats(wide, Shape{1001}), bf16);
  xs.push_back(bf16);
  double loop = 0.0;
  for (const Tensor& x : xs) loop += sum_squares(ctx, x);
  const double many = sum_squares_many(ctx, xs);
  EXPECT_GT(many, 0.0);
  EXPECT_EQ(many, loop);
  EXPECT_EQ(sum_squares_many(ctx, std::vector<Tensor>{}), 0.0);
}

TEST(OpsSumSquaresMany, RefusesATensorOnAnotherDevice) {
  Context cuda;
  cuda.device = Device::cuda(0);
  const std::vector<Tensor> xs = {Tensor::zeros({3}, DType::kF32, MemoryCategory::kGradients, cpu_allocator())};
  test::expect_error([&] { (void)sum_squares_many(cuda, xs); }, "sum_squares_many: x [3] is on cpu");
}

}  // namespace
}  // namespace cleave::ops::sum_squares_many_test
