// add / add_inplace / scale_inplace / axpy / sum_squares against double references; sum_squares is
// accumulated in double (exact on small integers far beyond float's 2^24) and independent of the thread
// count. The multi-tensor forms (scale_inplace_many, sum_squares_exact_many) give the single-tensor bits / digits
// of each tensor in turn at 1 and 2 threads and from inside a parallel region.
#include "kernels/cpu/elementwise.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::elementwise_test {
namespace {

TEST(KernelElementwise, AddFamily) {
  for (int64_t n : {1, 3, 37, 65537, 300007}) {  // the last two serial and a team (parallel.hpp)
    const auto a = test::random_floats(static_cast<size_t>(n), 10);
    const auto b = test::random_floats(a.size(), 11);
    auto out = test::poisoned(a.size());
    add(a.data(), b.data(), out.data(), n);
    std::vector<double> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = double(a[i]) + b[i];
    test::expect_close(out, want, 1e-7, 1e-6, "add");

    auto y = a;
    add_inplace(y.data(), b.data(), n);
    test::expect_close(y, want, 1e-7, 1e-6, "add_inplace");

    y = a;
    scale_inplace(y.data(), -1.5f, n);
    for (size_t i = 0; i < a.size(); ++i) want[i] = -1.5 * a[i];
    test::expect_close(y, want, 1e-7, 1e-6, "scale_inplace");

    y = a;
    axpy(0.25f, b.data(), y.data(), n);
    for (size_t i = 0; i < a.size(); ++i) want[i] = double(a[i]) + 0.25 * b[i];
    test::expect_close(y, want, 1e-7, 1e-6, "axpy");
    EXPECT_GT(test::l2_norm(y), 0.0);
  }
}

TEST(KernelElementwise, SumSquaresAccumulatesInDouble) {
  // 3 * 2^22 elements of value 3: 9 * 12582912 = 113246208 is not representable in float accumulation.
  const int64_t n = 3 * (int64_t{1} << 22) + 5;
  std::vector<float> x(static_cast<size_t>(n), 3.0f);
  EXPECT_EQ(sum_squares(x.data(), n), 9.0 * static_cast<double>(n));
  EXPECT_EQ(sum_squares(x.data(), 0), 0.0);
}

TEST(KernelElementwise, SumSquaresMatchesReferenceAndIsThreadIndependent) {
  const int64_t n = 200003;
  const auto x = test::random_floats(static_cast<size_t>(n), 12);
  double want = 0.0;
  for (float v : x) want += double(v) * v;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = sum_squares(x.data(), n);
  omp_set_num_threads(2);
  const double two = sum_squares(x.data(), n);
  omp_set_num_threads(saved);
  EXPECT_NEAR(one, want, 1e-9 * want);
  EXPECT_EQ(one, two);
  EXPECT_GT(one, 0.0);
}

// Sizes around the 16,384-element piece and the 65,536-element exact chunk, an empty tensor, and a call whose
// total is below the parallel threshold.
const std::vector<std::vector<int64_t>> kManySizes = {{7, 0, 1, 16384, 16385, 40001, 3, 65536, 65537, 200003},
                                                      {5, 33, 1000}};

TEST(KernelElementwise, ScaleManyGivesThePerTensorBits) {
  for (const std::vector<int64_t>& sizes : kManySizes) {
    std::vector<std::vector<float>> start;
    for (size_t t = 0; t < sizes.size(); ++t) start.push_back(test::random_floats(static_cast<size_t>(sizes[t]), 700 + t));
    test::for_each_thread_count({1, 2}, [&](int threads) {
      for (bool nested : {false, true}) {
        std::vector<std::vector<float>> got = start, ref = start;
        std::vector<FloatSpan> spans;
        for (size_t t = 0; t < sizes.size(); ++t) {
          scale_inplace(ref[t].data(), 0.3728f, sizes[t]);
          spans.push_back({got[t].data(), sizes[t]});
        }
        if (nested) {
#pragma omp parallel num_threads(2)
          {
#pragma omp single
            scale_inplace_many(spans.data(), static_cast<int64_t>(spans.size()), 0.3728f);
          }
        } else {
          scale_inplace_many(spans.data(), static_cast<int64_t>(spans.size()), 0.3728f);
        }
        for (size_t t = 0; t < sizes.size(); ++t) {
          const std::string at = "tensor " + std::to_string(t) + " (" + std::to_string(sizes[t]) + ") threads " +
                                 std::to_string(threads) + (nested ? " nested" : "");
          EXPECT_TRUE(test::same_bits(got[t], ref[t])) << at;
          if (sizes[t] > 0) {
            EXPECT_FALSE(test::same_bits(got[t], start[t])) << at << ": not scaled";
          }
        }
      }
    });
  }
}

TEST(KernelElementwise, SumSquaresExactManyGivesThePerTensorDigits) {
  for (const std::vector<int64_t>& sizes : kManySizes) {
    for (int special : {0, 1, 2}) {  // none, an infinity, an infinity and a NaN (the counts must match too)
      std::vector<std::vector<float>> xs;
      for (size_t t = 0; t < sizes.size(); ++t) {
        xs.push_back(test::random_floats(static_cast<size_t>(sizes[t]), 800 + t, 1e3f));
        for (size_t i = 0; i < xs.back().size(); i += 911) xs.back()[i] = std::ldexp(1.5f, -140);  // subnormal
      }
      const size_t last = sizes.size() - 1;
      if (special >= 1) xs[last][2] = -std::numeric_limits<float>::infinity();
      if (special >= 2) xs[0][1] = std::numeric_limits<float>::quiet_NaN();
      ExactSquareSum want;
      for (size_t t = 0; t < sizes.size(); ++t) sum_squares_exact(xs[t].data(), sizes[t], want);
      std::vector<ConstFloatSpan> spans;
      for (size_t t = 0; t < sizes.size(); ++t) spans.push_back({xs[t].data(), sizes[t]});
      test::for_each_thread_count({1, 2}, [&](int threads) {
        for (bool nested : {false, true}) {
          ExactSquareSum got;
          if (nested) {
#pragma omp parallel num_threads(2)
            {
#pragma omp single
              sum_squares_exact_many(spans.data(), static_cast<int64_t>(spans.size()), got);
            }
          } else {
            sum_squares_exact_many(spans.data(), static_cast<int64_t>(spans.size()), got);
          }
          const std::string at = "sizes " + std::to_string(sizes.size()) + " special " + std::to_string(special) +
                                 " threads " + std::to_string(threads) + (nested ? " nested" : "");
          EXPECT_TRUE(got == want) << at;
          EXPECT_EQ(got.nan, want.nan) << at;
          EXPECT_EQ(got.inf, want.inf) << at;
          const double a = got.to_double(), b = want.to_double();
          EXPECT_TRUE(std::memcmp(&a, &b, sizeof a) == 0) << at << ": " << a << " vs " << b;
        }
      });
      if (special == 0) {
        EXPECT_GT(want.to_double(), 0.0);
      }
      if (special == 1) {
        EXPECT_EQ(want.inf, 1u);
      }
    }
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::elementwise_test
