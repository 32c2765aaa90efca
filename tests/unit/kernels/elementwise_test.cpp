// add / add_inplace / scale_inplace / axpy / sum_squares against double references; sum_squares is
// accumulated in double (exact on small integers far beyond float's 2^24) and independent of the thread
// count.
#include "kernels/cpu/elementwise.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

TEST(KernelElementwise, AddFamily) {
  for (int64_t n : {1, 3, 37, 65537}) {
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

}  // namespace
}  // namespace cleave::kernels::cpu
