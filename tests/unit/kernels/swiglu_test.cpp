// SwiGLU kernels against double references on odd sizes (a tail past any vector width, one element, a size
// that goes parallel); the gradient is also checked by central finite differences of a double loss.
#include "kernels/cpu/swiglu.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

double silu(double g) { return g / (1.0 + std::exp(-g)); }

TEST(KernelSwiglu, ForwardAndBackwardMatchDoubleReference) {
  for (int64_t n : {int64_t{1}, int64_t{19}, int64_t{1001}, int64_t{40001}}) {
    const auto gate = test::random_floats(static_cast<size_t>(n), 1, 4.0f);
    const auto up = test::random_floats(static_cast<size_t>(n), 2, 2.0f);
    const auto dh = test::random_floats(static_cast<size_t>(n), 3);
    auto h = test::poisoned(static_cast<size_t>(n));
    swiglu_forward(gate.data(), up.data(), h.data(), n);
    auto dgate = test::poisoned(static_cast<size_t>(n));
    auto dup = test::poisoned(static_cast<size_t>(n));
    swiglu_backward(gate.data(), up.data(), dh.data(), dgate.data(), dup.data(), n);
    std::vector<double> want_h(h.size()), want_dg(h.size()), want_du(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
      const double g = gate[i], s = 1.0 / (1.0 + std::exp(-g));
      want_h[i] = silu(g) * up[i];
      want_dg[i] = double(dh[i]) * up[i] * (s + g * s * (1.0 - s));
      want_du[i] = double(dh[i]) * silu(g);
    }
    test::expect_close(h, want_h, 1e-6, 1e-5, "swiglu h");
    test::expect_close(dgate, want_dg, 1e-6, 1e-5, "swiglu dgate");
    test::expect_close(dup, want_du, 1e-6, 1e-5, "swiglu dup");
    EXPECT_GT(test::l2_norm(h), 0.0);
    EXPECT_GT(test::l2_norm(dgate), 0.0);
  }
}

TEST(KernelSwiglu, GradientMatchesFiniteDifferences) {
  const int64_t n = 11;
  auto gate = test::random_floats(static_cast<size_t>(n), 4, 3.0f);
  auto up = test::random_floats(static_cast<size_t>(n), 5, 2.0f);
  const auto dh = test::random_floats(static_cast<size_t>(n), 6);
  auto loss = [&] {
    double l = 0.0;
    for (size_t i = 0; i < gate.size(); ++i) l += double(dh[i]) * silu(gate[i]) * up[i];
    return l;
  };
  std::vector<float> dgate(gate.size()), dup(gate.size());
  swiglu_backward(gate.data(), up.data(), dh.data(), dgate.data(), dup.data(), n);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double fg = test::finite_difference(gate, i, 1e-3f, loss);
    EXPECT_NEAR(dgate[i], fg, 1e-3 * (1.0 + std::fabs(fg))) << "gate " << i;
    const double fu = test::finite_difference(up, i, 1e-3f, loss);
    EXPECT_NEAR(dup[i], fu, 1e-3 * (1.0 + std::fabs(fu))) << "up " << i;
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu
