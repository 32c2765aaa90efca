// AdamW against a hand-written double reference of torch.optim.AdamW over several steps (bias
// correction, decoupled weight decay), with and without weight decay; bad hyper-parameters throw. The multi-tensor
// update gives adamw_update's bits per tensor at 1 and 2 threads; every vector path at 1, 2 and 3 threads gives the
// bits of a scalar loop in the kernel's order of operations.
#include "kernels/cpu/adamw.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/adamw_constants.hpp"
#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::adamw_test {
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

// Tensor sizes around the vector width and the multi-tensor piece (16,384), an empty one, and a total large enough
// to be worth a team (and one too small): adamw_update_many over all of them, 1 and 2 threads, three steps, equals
// adamw_update on each tensor in turn bit for bit (param, m and v).
TEST(KernelAdamW, ManyTensorsGiveThePerTensorBits) {
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{7, 0, 1, 16384, 16385, 40001, 3, 100003},
                                            std::vector<int64_t>{5, 33, 1000}}) {
    struct State {
      std::vector<float> p, m, v;
    };
    std::vector<State> want(sizes.size());
    std::vector<std::vector<float>> grads;
    for (size_t t = 0; t < sizes.size(); ++t) {
      const auto n = static_cast<size_t>(sizes[t]);
      want[t] = {test::random_floats(n, 300 + t), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
      grads.push_back(test::random_floats(n, 400 + t));
    }
    auto decay = [](size_t t) { return t % 2 == 0 ? 0.1f : 0.0f; };
    test::for_each_thread_count({1, 2}, [&](int threads) {
      std::vector<State> got = want, ref = want;
      for (int64_t step = 1; step <= 3; ++step) {
        std::vector<AdamWTensor> tensors;
        for (size_t t = 0; t < sizes.size(); ++t) {
          adamw_update(ref[t].p.data(), grads[t].data(), ref[t].m.data(), ref[t].v.data(), sizes[t], 1e-2f, 0.9f,
                       0.95f, 1e-8f, decay(t), step);
          tensors.push_back({got[t].p.data(), grads[t].data(), got[t].m.data(), got[t].v.data(), sizes[t], decay(t)});
        }
        adamw_update_many(tensors.data(), static_cast<int64_t>(tensors.size()), 1e-2f, 0.9f, 0.95f, 1e-8f, step);
      }
      for (size_t t = 0; t < sizes.size(); ++t) {
        const std::string at = "tensor " + std::to_string(t) + " (" + std::to_string(sizes[t]) + ") threads " +
                               std::to_string(threads);
        EXPECT_TRUE(test::same_bits(got[t].p, ref[t].p)) << at << " param";
        EXPECT_TRUE(test::same_bits(got[t].m, ref[t].m)) << at << " m";
        EXPECT_TRUE(test::same_bits(got[t].v, ref[t].v)) << at << " v";
        if (sizes[t] > 0) {
          EXPECT_FALSE(test::same_bits(got[t].p, want[t].p)) << at << ": not updated";
        }
      }
    });
  }
  float p = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
  const AdamWTensor one{&p, &g, &m, &v, 1, 0.0f};
  EXPECT_THROW(adamw_update_many(&one, 1, 1e-3f, 0.9f, 0.999f, 0.0f, 1), Error);
}

// The kernel's order of operations, one element at a time, without contraction into FMA (as the kernel is compiled).
__attribute__((optimize("fp-contract=off"))) void adamw_scalar(const AdamWConstants& k, float& p, float g, float& m,
                                                              float& v) {
  m = m + k.one_minus_beta1 * (g - m);
  v = k.beta2 * v + k.one_minus_beta2 * g * g;
  const float decayed = p * k.decay;
  p = decayed - k.step_size * m / (std::sqrt(v) * k.inv_bc2_sqrt + k.eps);
}

// Operands over 30 binades (so an order change rounds differently), lengths at and off every vector width, 40003
// sharing a team; three steps of adamw_update_isa and adamw_update_many_isa (two tensors cut at an odd length) on each
// path at 1, 2 and 3 threads against the scalar loop, bit for bit; an infinite gradient and a NaN parameter propagate.
TEST(KernelAdamW, EveryIsaPathAndThreadCountGivesTheSameBits) {
  const float lr = 3e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  for (const int64_t n : {1, 7, 16, 17, 130, 1000, 40003}) {
    const auto size = static_cast<size_t>(n);
    const auto p0 = test::random_floats_spanning_binades(size, 500, 30);
    auto v0 = test::random_floats_spanning_binades(size, 501, 30);
    for (float& x : v0) x = std::fabs(x);
    const auto m0 = test::random_floats_spanning_binades(size, 502, 30);
    std::vector<std::vector<float>> grads;
    for (uint64_t s = 0; s < 3; ++s) grads.push_back(test::random_floats_spanning_binades(size, 503 + s, 30));
    if (n >= 17) {
      grads[1][n / 2] = std::numeric_limits<float>::infinity();
      grads[2][n - 1] = std::numeric_limits<float>::quiet_NaN();
    }
    std::vector<float> want_p = p0, want_m = m0, want_v = v0;
    for (int64_t step = 1; step <= 3; ++step) {
      const AdamWConstants k = kernels::adamw_constants(lr, b1, b2, eps, wd, step);
      for (size_t i = 0; i < size; ++i) adamw_scalar(k, want_p[i], grads[step - 1][i], want_m[i], want_v[i]);
    }
    test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
      const std::string at = test::isa_label(isa) + ", " + std::to_string(threads) + " threads, n " + std::to_string(n);
      std::vector<float> p = p0, m = m0, v = v0, pm = p0, mm = m0, vm = v0;
      const int64_t cut = n / 3;  // the multi-tensor update's two tensors: [0, cut) and [cut, n)
      for (int64_t step = 1; step <= 3; ++step) {
        const float* g = grads[static_cast<size_t>(step - 1)].data();
        adamw_update_isa(isa, p.data(), g, m.data(), v.data(), n, lr, b1, b2, eps, wd, step);
        const AdamWTensor two[] = {{pm.data(), g, mm.data(), vm.data(), cut, wd},
                                   {pm.data() + cut, g + cut, mm.data() + cut, vm.data() + cut, n - cut, wd}};
        adamw_update_many_isa(isa, two, 2, lr, b1, b2, eps, step);
      }
      EXPECT_TRUE(test::same_bits(p, want_p)) << at << " param";
      EXPECT_TRUE(test::same_bits(m, want_m)) << at << " m";
      EXPECT_TRUE(test::same_bits(v, want_v)) << at << " v";
      EXPECT_TRUE(test::same_bits(pm, want_p)) << at << " param, many";
      EXPECT_TRUE(test::same_bits(mm, want_m)) << at << " m, many";
      EXPECT_TRUE(test::same_bits(vm, want_v)) << at << " v, many";
    });
    EXPECT_FALSE(test::same_bits(want_p, p0)) << "n " << n << ": not updated";
    if (n >= 17) {
      EXPECT_TRUE(std::isnan(want_p[static_cast<size_t>(n / 2)]));  // inf / inf
      EXPECT_TRUE(std::isnan(want_p[size - 1]));
    }
  }
}

TEST(KernelAdamW, RejectsBadArguments) {
  float p = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 1e-3f, 1.0f, 0.999f, 1e-8f, 0.0f, 1), Error);
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 1e-3f, 0.9f, 0.999f, 0.0f, 0.0f, 1), Error);
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0), InternalError);
}

}  // namespace
}  // namespace cleave::kernels::cpu::adamw_test
