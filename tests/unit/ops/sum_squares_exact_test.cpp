// ops::sum_squares_exact and kernels::ExactSquareSum (the gradient norm's sum): the digits, and the double made
// from them, must not depend on the order of the elements, on how they are split into tensors, chunks, threads or
// ranks (the wire form summed in any order), for awkward sizes around the 65,536-element chunk and values over the
// whole f32 range (subnormals to the largest finite); the sum must be exact where a double sum is not; NaN and
// infinity propagate (NaN wins); a tensor on another device is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/exact_square_sum.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::sum_squares_exact_test {
namespace {

using kernels::ExactSquareSum;

// Values spread over the whole f32 exponent range (and both signs), some subnormal, some zero.
std::vector<float> wide_values(std::int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> exponent(-149, 127);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const int e = exponent(rng);
    float x = std::ldexp(mantissa(rng), std::min(e, 126));
    if (i % 97 == 5) x = 0.0f;
    if (i % 13 == 1) x = -x;
    v[i] = x;
  }
  return v;
}

ExactSquareSum exact_of(const std::vector<float>& v) {
  const Context ctx;
  const std::vector<Tensor> one = {Tensor::from_floats(v, Shape{static_cast<std::int64_t>(v.size())})};
  return sum_squares_exact(ctx, one);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(OpsSumSquaresExact, ShuffledAndSplitGiveTheSameDigits) {
  std::mt19937 rng(std::random_device{}());
  const Context ctx;
  for (std::int64_t n : {1, 7, 65535, 65536, 65537, 200003}) {
    SCOPED_TRACE(n);
    std::vector<float> values = wide_values(n, rng);
    const ExactSquareSum whole = exact_of(values);
    const double want = whole.to_double();
    EXPECT_TRUE(std::isfinite(want));
    for (int trial = 0; trial < 3; ++trial) {
      std::shuffle(values.begin(), values.end(), rng);
      EXPECT_TRUE(exact_of(values) == whole);
      // Split into random pieces (tensors of one call) and into "ranks" (wire forms summed in a shuffled order).
      std::vector<Tensor> pieces;
      std::vector<std::vector<double>> wires;
      std::size_t at = 0;
      while (at < values.size()) {
        const std::size_t len = std::min(values.size() - at, std::uniform_int_distribution<std::size_t>(1, 70001)(rng));
        std::vector<float> part(values.begin() + static_cast<std::ptrdiff_t>(at),
                                values.begin() + static_cast<std::ptrdiff_t>(at + len));
        pieces.push_back(Tensor::from_floats(part, Shape{static_cast<std::int64_t>(len)}));
        wires.push_back(exact_of(part).to_wire());
        at += len;
      }
      std::shuffle(pieces.begin(), pieces.end(), rng);
      const ExactSquareSum split = sum_squares_exact(ctx, pieces);
      EXPECT_TRUE(split == whole);
      EXPECT_TRUE(same_bits(split.to_double(), want));
      std::shuffle(wires.begin(), wires.end(), rng);
      std::vector<double> reduced(ExactSquareSum::kWireSize, 0.0);
      for (const auto& w : wires) {
        for (std::size_t i = 0; i < reduced.size(); ++i) reduced[i] += w[i];
      }
      EXPECT_TRUE(same_bits(ExactSquareSum::from_wire(reduced).to_double(), want));
    }
    // Close to a long double reference.
    long double ref = 0;
    for (float x : values) ref += static_cast<long double>(x) * x;
    EXPECT_NEAR(want / static_cast<double>(ref), 1.0, 1e-15);
  }
}

TEST(OpsSumSquaresExact, ExactWhereADoubleSumRounds) {
  // x = 2^-36 squares to 2^-72, below half an ulp of 1 (2^-53): a double sum starting at 1 drops every one of
  // them, but 2^20 of them make exactly 2^-52, one ulp of 1.
  std::vector<float> values(std::size_t{1} << 20, std::ldexp(1.0f, -36));
  values.push_back(1.0f);
  double large_first = 1.0;
  for (std::size_t i = 0; i + 1 < values.size(); ++i) large_first += std::ldexp(1.0, -72);
  EXPECT_EQ(large_first, 1.0) << "the double sum must lose the small squares for this test to mean anything";
  const double exact = exact_of(values).to_double();
  EXPECT_EQ(exact, 1.0 + std::ldexp(1.0, -52));
  std::reverse(values.begin(), values.end());
  EXPECT_EQ(exact_of(values).to_double(), exact);
  // Extremes: the largest finite f32 and the smallest subnormal.
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(exact_of({big}).to_double(), static_cast<double>(big) * big);
  EXPECT_EQ(exact_of({tiny, tiny, tiny, tiny}).to_double(), 4.0 * static_cast<double>(tiny) * tiny);
  EXPECT_EQ(exact_of({3.0f, -4.0f}).to_double(), 25.0);
  EXPECT_EQ(sum_squares_exact(Context{}, std::vector<Tensor>{}).to_double(), 0.0);
}

TEST(OpsSumSquaresExact, InfinityAndNanPropagate) {
  std::mt19937 rng(7);
  for (std::int64_t n : {1, 65536, 131075}) {
    std::vector<float> values = wide_values(n, rng);
    const std::size_t at = static_cast<std::size_t>(n / 2);
    values[at] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(exact_of(values).to_double(), std::numeric_limits<double>::infinity()) << n;
    values[static_cast<std::size_t>(n - 1)] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(exact_of(values).to_double())) << n;
    // Through the wire: one rank's NaN makes the total NaN.
    std::vector<double> wire = exact_of(values).to_wire();
    const std::vector<double> clean = exact_of({1.0f}).to_wire();
    for (std::size_t i = 0; i < wire.size(); ++i) wire[i] += clean[i];
    EXPECT_TRUE(std::isnan(ExactSquareSum::from_wire(wire).to_double()));
  }
}

TEST(OpsSumSquaresExact, RefusesATensorOnAnotherDevice) {
  Context cuda;
  cuda.device = Device::cuda(0);
  const std::vector<Tensor> xs = {Tensor::zeros({3}, DType::kF32, MemoryCategory::kGradients, cpu_allocator())};
  test::expect_error([&] { (void)sum_squares_exact(cuda, xs); }, "sum_squares_exact: x [3] is on cpu");
}

}  // namespace
}  // namespace cleave::ops::sum_squares_exact_test
