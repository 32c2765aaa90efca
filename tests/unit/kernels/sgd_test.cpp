// SGD against a hand-written double reference of torch.optim.SGD (dampening 0) over several steps, for
// plain, momentum, Nesterov and weight-decay variants; momentum 0 needs no buffer; Nesterov without
// momentum is rejected as PyTorch does. The multi-tensor update gives sgd_update's bits per tensor at 1 and 2
// threads.
#include "kernels/cpu/sgd.hpp"

#include <gtest/gtest.h>

#include <string>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::sgd_test {
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

// sgd_update_many over tensors of awkward sizes (an empty one, around the 16,384-element piece, a total worth a team)
// equals sgd_update on each in turn, bit for bit, for every variant, at 1 and 2 threads, over three steps.
TEST(KernelSgd, ManyTensorsGiveThePerTensorBits) {
  const std::vector<int64_t> sizes = {7, 0, 16384, 16385, 40001, 3};
  for (const Variant var : {Variant{0.0f, 0.01f, false}, Variant{0.9f, 0.05f, true}, Variant{0.5f, 0.0f, false}}) {
    test::for_each_thread_count({1, 2}, [&](int threads) {
      std::vector<std::vector<float>> p_got, p_ref, b_got, b_ref, grads;
      for (size_t t = 0; t < sizes.size(); ++t) {
        const auto n = static_cast<size_t>(sizes[t]);
        p_got.push_back(test::random_floats(n, 500 + t));
        p_ref.push_back(p_got.back());
        b_got.emplace_back(n, 0.0f);
        b_ref.emplace_back(n, 0.0f);
        grads.push_back(test::random_floats(n, 600 + t));
      }
      const bool momentum = var.momentum != 0.0f;
      for (int step = 0; step < 3; ++step) {
        std::vector<SgdTensor> tensors;
        for (size_t t = 0; t < sizes.size(); ++t) {
          const float wd = t % 2 == 0 ? var.weight_decay : 0.0f;
          sgd_update(p_ref[t].data(), grads[t].data(), momentum ? b_ref[t].data() : nullptr, sizes[t], 0.05f,
                     var.momentum, wd, var.nesterov, step == 0);
          tensors.push_back({p_got[t].data(), grads[t].data(), momentum ? b_got[t].data() : nullptr, sizes[t], wd});
        }
        sgd_update_many(tensors.data(), static_cast<int64_t>(tensors.size()), 0.05f, var.momentum, var.nesterov,
                        step == 0);
      }
      for (size_t t = 0; t < sizes.size(); ++t) {
        const std::string at = "momentum " + std::to_string(var.momentum) + " tensor " + std::to_string(t) +
                               " threads " + std::to_string(threads);
        EXPECT_TRUE(test::same_bits(p_got[t], p_ref[t])) << at << " param";
        EXPECT_TRUE(test::same_bits(b_got[t], b_ref[t])) << at << " momentum buffer";
      }
    });
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::sgd_test
