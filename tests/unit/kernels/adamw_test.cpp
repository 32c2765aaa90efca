// AdamW against a hand-written double reference of torch.optim.AdamW over several steps (bias
// correction, decoupled weight decay), with and without weight decay; bad hyper-parameters throw.
#include "kernels/cpu/adamw.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

TEST(KernelAdamW, MatchesDoubleReferenceOverSteps) {
  for (const float wd : {0.0f, 0.1f}) {
    const int64_t n = 1037;
    auto param = test::random_floats(static_cast<size_t>(n), 70);
    std::vector<float> m(param.size(), 0.0f), v(param.size(), 0.0f);
    std::vector<double> p_ref(param.begin(), param.end()), m_ref(param.size(), 0.0), v_ref(param.size(), 0.0);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8;
    for (int64_t step = 1; step <= 6; ++step) {
      const auto grad = test::random_floats(param.size(), 100 + static_cast<uint64_t>(step));
      adamw_update(param.data(), grad.data(), m.data(), v.data(), n, float(lr), float(b1), float(b2), float(eps), wd,
                   step);
      for (size_t i = 0; i < param.size(); ++i) {
        p_ref[i] *= 1.0 - lr * wd;
        m_ref[i] = b1 * m_ref[i] + (1.0 - b1) * grad[i];
        v_ref[i] = b2 * v_ref[i] + (1.0 - b2) * double(grad[i]) * grad[i];
        const double mhat = m_ref[i] / (1.0 - std::pow(b1, double(step)));
        const double vhat = v_ref[i] / (1.0 - std::pow(b2, double(step)));
        p_ref[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
      test::expect_close(param, p_ref, 1e-6, 1e-5, "param after step " + std::to_string(step));
      test::expect_close(m, m_ref, 1e-7, 1e-5, "m");
      test::expect_close(v, v_ref, 1e-8, 1e-5, "v");
    }
    EXPECT_GT(test::l2_norm(param), 0.0);
  }
}

TEST(KernelAdamW, RejectsBadArguments) {
  float p = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 1e-3f, 1.0f, 0.999f, 1e-8f, 0.0f, 1), Error);
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 1e-3f, 0.9f, 0.999f, 0.0f, 0.0f, 1), Error);
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0), InternalError);
}

}  // namespace
}  // namespace cleave::kernels::cpu
