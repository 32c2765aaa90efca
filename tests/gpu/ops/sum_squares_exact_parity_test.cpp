// Seam parity of the gradient norm's exact sum (ops::sum_squares_exact; kernels/exact_square_sum.hpp,
// kernels/cuda/sum_squares_exact.cu) on cuda:0 against the CPU backend: the same fixed-point digits and NaN /
// infinity counts, so to_double() gives the same bits (tolerance 0: integer addition, no rounding until the host's
// to_double, which both backends share). Inputs that reach every part of the kernel: values over the whole f32
// range (subnormals to the largest finite, both signs, zeros), sizes 1, 7, 2,049 and one past a full grid (1,024
// blocks x 256 threads x 8 = 2,097,152: the grid-stride loop wraps), an empty tensor, 2^21 copies of the largest
// mantissa at the top exponent (every digit carries, in the threads, the blocks and the device accumulator), and
// a NaN and infinities (counted, not summed). Shuffling the tensors, splitting one into slices and a second call
// must give the same digits (order independence, no state left between calls). Skips without a device
// (parity_util.hpp). Compiled, not run on a GPU yet.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "kernels/exact_square_sum.hpp"
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::sum_squares_exact_parity_test {
namespace {

using kernels::ExactSquareSum;

class SumSquaresExactParity : public OpsParity {
 protected:
  static Tensor f32_tensor(const std::vector<float>& v) {
    return from_floats(v, Shape{static_cast<std::int64_t>(v.size())}, DType::kF32);
  }
};

std::string digits_of(const ExactSquareSum& s) {
  ExactSquareSum n = s;
  n.normalize();
  std::ostringstream out;
  out << std::hex;
  for (int i = ExactSquareSum::kDigits - 1; i >= 0; --i) out << n.digit[i] << (i > 0 ? "." : "");
  out << std::dec << " nan " << n.nan << " inf " << n.inf;
  return out.str();
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// n values spread over the whole f32 range (kernels' unit test draws the same way), some zero, some negative.
std::vector<float> wide_values(std::int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> exponent(-149, 127);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    float x = std::ldexp(mantissa(rng), std::min(exponent(rng), 126));
    if (i % 97 == 5) x = 0.0f;
    if (i % 13 == 1) x = -x;
    v[i] = x;
  }
  return v;
}

TEST_F(SumSquaresExactParity, DigitsAndBitsAreTheCpus) {
  std::vector<Tensor> host;
  for (std::int64_t n : {1, 7, 2049, 2097152 + 13}) host.push_back(f32_tensor(wide_values(n, rng())));
  host.push_back(f32_tensor({}));
  host.push_back(f32_tensor({std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 0.0f,
                             -0.0f}));
  // Every square at the top of the range with the largest mantissa: digits near 2^32 everywhere, so the threads',
  // the blocks' and the accumulator's carries are all exercised.
  host.push_back(f32_tensor(std::vector<float>(std::size_t{1} << 21, std::numeric_limits<float>::max())));
  std::vector<Tensor> device;
  for (const Tensor& t : host) device.push_back(to_gpu(t));

  const ExactSquareSum want = ops::sum_squares_exact(cpu(), host);
  const ExactSquareSum got = ops::sum_squares_exact(gpu(), device);
  ASSERT_TRUE(std::isfinite(want.to_double()) && want.to_double() > 0.0) << "the reference could not fail";
  EXPECT_TRUE(got == want) << "gpu " << digits_of(got) << "\ncpu " << digits_of(want);
  EXPECT_TRUE(same_bits(got.to_double(), want.to_double())) << got.to_double() << " vs " << want.to_double();

  // Another order, and the large tensor cut into slices of awkward sizes: the same digits.
  std::vector<Tensor> shuffled = device;
  std::shuffle(shuffled.begin(), shuffled.end(), rng());
  const Tensor& large = device[3];
  for (std::int64_t at = 0, len = 1; at < large.numel(); at += len, len = len * 3 + 1) {
    shuffled.push_back(large.slice(at, std::min(large.numel(), at + len)));
  }
  std::vector<Tensor> doubled_host = host;
  doubled_host.push_back(host[3]);
  const ExactSquareSum want_doubled = ops::sum_squares_exact(cpu(), doubled_host);
  EXPECT_TRUE(ops::sum_squares_exact(gpu(), shuffled) == want_doubled) << "shuffled and sliced";
  EXPECT_TRUE(ops::sum_squares_exact(gpu(), device) == want) << "a second call (the accumulator is zeroed per call)";
  EXPECT_EQ(ops::sum_squares_exact(gpu(), std::vector<Tensor>{}).to_double(), 0.0);
}

TEST_F(SumSquaresExactParity, NanAndInfinityAreCountedAsOnTheCpu) {
  std::vector<float> values = wide_values(300001, rng());
  values[17] = std::numeric_limits<float>::infinity();
  values[150000] = -std::numeric_limits<float>::infinity();
  const std::vector<Tensor> with_inf = {f32_tensor(values)};
  const ExactSquareSum want_inf = ops::sum_squares_exact(cpu(), with_inf);
  const ExactSquareSum got_inf = ops::sum_squares_exact(gpu(), std::vector<Tensor>{to_gpu(with_inf[0])});
  EXPECT_EQ(want_inf.inf, 2u);
  EXPECT_TRUE(got_inf == want_inf) << "gpu " << digits_of(got_inf) << "\ncpu " << digits_of(want_inf);
  EXPECT_EQ(got_inf.to_double(), std::numeric_limits<double>::infinity());

  values[299999] = std::numeric_limits<float>::quiet_NaN();
  values[3] = -std::numeric_limits<float>::quiet_NaN();
  const std::vector<Tensor> with_nan = {f32_tensor(values)};
  const ExactSquareSum want_nan = ops::sum_squares_exact(cpu(), with_nan);
  const ExactSquareSum got_nan = ops::sum_squares_exact(gpu(), std::vector<Tensor>{to_gpu(with_nan[0])});
  EXPECT_EQ(want_nan.nan, 2u);
  EXPECT_TRUE(got_nan == want_nan) << "gpu " << digits_of(got_nan) << "\ncpu " << digits_of(want_nan);
  EXPECT_TRUE(std::isnan(got_nan.to_double()));
}

}  // namespace
}  // namespace cleave::testing::sum_squares_exact_parity_test
