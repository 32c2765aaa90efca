// Seam parity of the gradient-norm reduction: ops::sum_squares_many on cuda:0 against the CPU backend, and
// against ops::sum_squares called per tensor on the GPU (bit-identical: each term is that op's value and the
// terms are added in order). Sizes 1, 257x3, 1001 and 70,001 (more than one block pass); relative 1e-12
// against the CPU (both accumulate in double; only the order inside a tensor differs). An empty list is 0.
// Compiled here without a GPU; NOT yet run on one.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::reduction_parity_test {
namespace {

TEST_F(OpsParity, SumSquaresManyMatchesTheCpuWithOneReadBack) {
  std::vector<Tensor> host, device;
  for (const Shape& shape : {Shape{1}, Shape{257, 3}, Shape{1001}, Shape{70001}}) {
    host.push_back(random(shape, DType::kF32, -2.0f, 2.0f));
    device.push_back(to_gpu(host.back()));
  }
  const double want = ops::sum_squares_many(cpu(), host);
  const double got = ops::sum_squares_many(gpu(), device);
  EXPECT_GT(want, 0.0);
  EXPECT_NEAR(got, want, 1e-12 * want);
  double in_order = 0.0;
  for (const Tensor& t : device) in_order += ops::sum_squares(gpu(), t);
  EXPECT_EQ(got, in_order) << "sum_squares_many must add sum_squares' values in order";
  EXPECT_EQ(ops::sum_squares_many(gpu(), device), got) << "not deterministic";
  EXPECT_EQ(ops::sum_squares_many(gpu(), std::vector<Tensor>{}), 0.0);
}

}  // namespace
}  // namespace cleave::testing::reduction_parity_test
