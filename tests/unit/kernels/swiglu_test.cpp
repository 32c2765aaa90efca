// SwiGLU kernels against double references on odd sizes (a tail past any vector width, one element, a size
// that goes parallel); the gradient is also checked by central finite differences of a double loss; every
// vector path this CPU has (AVX2, AVX-512) gives the baseline path's bits, saturation and NaN included.
#include "kernels/cpu/swiglu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::swiglu_test {
namespace {

double silu(double g) { return g / (1.0 + std::exp(-g)); }

TEST(KernelSwiglu, ForwardAndBackwardMatchDoubleReference) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{15}, int64_t{17}, int64_t{19}, int64_t{1001}, int64_t{40001}}) {
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

TEST(KernelSwiglu, SaturatesWithoutNaN) {
  // exp(-g) overflows f32 for g < -88: the sigmoid must go to 0 (h -> -0 or a tiny value), never NaN.
  const std::vector<float> gate = {-200.0f, -90.0f, -30.0f, 30.0f, 90.0f, 200.0f};
  const std::vector<float> up(gate.size(), 1.5f), dh(gate.size(), 2.0f);
  std::vector<float> h(gate.size()), dg(gate.size()), du(gate.size());
  swiglu_forward(gate.data(), up.data(), h.data(), static_cast<int64_t>(gate.size()));
  swiglu_backward(gate.data(), up.data(), dh.data(), dg.data(), du.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double want = gate[i] > 0 ? double(gate[i]) * up[i] : 0.0;
    EXPECT_NEAR(h[i], want, 1e-5 * (1.0 + std::fabs(want))) << "g " << gate[i];
    EXPECT_NEAR(dg[i], gate[i] > 0 ? 2.0 * 1.5 : 0.0, 1e-5) << "g " << gate[i];
    EXPECT_NEAR(du[i], 2.0 * want / 1.5, 1e-5 * (1.0 + std::fabs(want))) << "g " << gate[i];
  }
}

TEST(KernelSwiglu, EveryIsaPathGivesTheSameBits) {
  EXPECT_TRUE(vector_isa_available(VectorIsa::kBaseline));
  double norm = 0.0;  // of the baseline outputs: zeros everywhere cannot pass
  for (int64_t n : {1, 9, 17, 31, 33, 40003}) {
    auto gate = test::random_floats(static_cast<size_t>(n), 11, 6.0f);
    const auto up = test::random_floats(gate.size(), 12, 2.0f);
    const auto dh = test::random_floats(gate.size(), 13);
    const float specials[] = {-100.0f, -9.0f, -0.0f, 0.0f, 1e-30f, 9.0f, 100.0f,
                              std::numeric_limits<float>::quiet_NaN()};
    // At positions that fall in full vectors on one path and in the scalar tail on another.
    if (n >= 9) {
      for (size_t i = 0; i < 8; ++i) gate[i * (gate.size() / 8)] = specials[i];
    }
    std::vector<float> h0(gate.size()), dg0(gate.size()), du0(gate.size());
    swiglu_forward_isa(VectorIsa::kBaseline, gate.data(), up.data(), h0.data(), n);
    swiglu_backward_isa(VectorIsa::kBaseline, gate.data(), up.data(), dh.data(), dg0.data(), du0.data(), n);
    for (float v : dg0) norm += std::isfinite(v) ? std::fabs(v) : 0.0;
    test::for_each_isa_path(test::kIsaPathsPastBaseline, [&](VectorIsa isa) {
      auto h = test::poisoned(gate.size());
      auto dg = test::poisoned(gate.size());
      auto du = test::poisoned(gate.size());
      swiglu_forward_isa(isa, gate.data(), up.data(), h.data(), n);
      swiglu_backward_isa(isa, gate.data(), up.data(), dh.data(), dg.data(), du.data(), n);
      EXPECT_EQ(std::memcmp(h.data(), h0.data(), h.size() * sizeof(float)), 0)
          << "forward, " << test::isa_label(isa) << ", n " << n;
      EXPECT_EQ(std::memcmp(dg.data(), dg0.data(), dg.size() * sizeof(float)), 0)
          << "dgate, " << test::isa_label(isa) << ", n " << n;
      EXPECT_EQ(std::memcmp(du.data(), du0.data(), du.size() * sizeof(float)), 0)
          << "dup, " << test::isa_label(isa) << ", n " << n;
    });
  }
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace cleave::kernels::cpu::swiglu_test
