// SGD against a hand-written double reference of torch.optim.SGD (dampening 0) over several steps, for
// plain, momentum, Nesterov and weight-decay variants; momentum 0 needs no buffer; Nesterov without
// momentum is rejected as PyTorch does.
#include "kernels/cpu/sgd.hpp"

#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu {
namespace {

struct Variant {
  float momentum, weight_decay;
  bool nesterov;
};

TEST(KernelSgd, MatchesDoubleReferenceOverSteps) {
  for (const Variant var : {Variant{0.0f, 0.0f, false}, Variant{0.0f, 0.01f, false}, Variant{0.9f, 0.0f, false},
                            Variant{0.9f, 0.05f, true}, Variant{0.5f, 0.01f, false}}) {
    const int64_t n = 1031;
    auto param = test::random_floats(static_cast<size_t>(n), 80);
    std::vector<float> buf(param.size(), 12345.0f);  // garbage: the first step must not read it
    std::vector<double> p_ref(param.begin(), param.end()), b_ref(param.size(), 0.0);
    const double lr = 0.05;
    for (int step = 0; step < 5; ++step) {
      const auto grad = test::random_floats(param.size(), 200 + static_cast<uint64_t>(step));
      sgd_update(param.data(), grad.data(), var.momentum == 0.0f ? nullptr : buf.data(), n, float(lr), var.momentum,
                 var.weight_decay, var.nesterov, step == 0);
      for (size_t i = 0; i < param.size(); ++i) {
        double g = grad[i] + double(var.weight_decay) * p_ref[i];
        if (var.momentum != 0.0f) {
          b_ref[i] = step == 0 ? g : double(var.momentum) * b_ref[i] + g;
          g = var.nesterov ? g + double(var.momentum) * b_ref[i] : b_ref[i];
        }
        p_ref[i] -= lr * g;
      }
      test::expect_close(param, p_ref, 1e-6, 1e-5, "param after step " + std::to_string(step));
      if (var.momentum != 0.0f) {
        test::expect_close(buf, b_ref, 1e-6, 1e-5, "momentum buffer");
      }
    }
    EXPECT_GT(test::l2_norm(param), 0.0);
  }
}

TEST(KernelSgd, NesterovNeedsMomentum) {
  float p = 1.0f, g = 1.0f;
  EXPECT_THROW(sgd_update(&p, &g, nullptr, 1, 0.1f, 0.0f, 0.0f, true, true), Error);
}

}  // namespace
}  // namespace cleave::kernels::cpu
