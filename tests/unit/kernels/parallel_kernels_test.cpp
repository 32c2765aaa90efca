// The kernels whose loops go through CLEAVE_PARALLEL_FOR (kernels/cpu/parallel.hpp) give the same bits on each of
// its branches: at 1 thread, at 2 threads (a team), and called from inside an active parallel region (the plain
// loop on the calling thread). Each case is large enough to be worth a team (32K elements) and awkward in its
// column count (not a multiple of a block or a vector), with random inputs, NaN-poisoned outputs for the written
// ones, and a norm check so an all-zero result cannot pass. The deterministic-mode contract: a result never depends
// on the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/maxpool.hpp"
#include "kernels/cpu/moe.hpp"
#include "kernels/cpu/sgd.hpp"
#include "kernels/cpu/softmax.hpp"
#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::parallel_kernels_test {
namespace {

using Outputs = std::vector<std::vector<float>>;

struct Case {
  std::string name;
  std::function<Outputs()> run;  // fresh outputs from fixed inputs
};

std::vector<int32_t> random_ids(size_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  const int64_t rows = 300, cols = 333;  // 99,900 elements: past the 32K threshold; 333 not a multiple of 16
  const auto x = test::random_floats(static_cast<size_t>(rows * cols), 1, 3.0f);
  const auto dy = test::random_floats(x.size(), 2);
  c.push_back({"softmax", [=] {
                 Outputs o{test::poisoned(x.size()), test::poisoned(x.size())};
                 softmax_forward(x.data(), o[0].data(), rows, cols);
                 softmax_backward(o[0].data(), dy.data(), o[1].data(), rows, cols);
                 return o;
               }});
  c.push_back({"cross_entropy", [=] {
                 std::vector<int32_t> targets = random_ids(static_cast<size_t>(rows), static_cast<int32_t>(cols), 3);
                 targets[5] = -1;  // an ignored row
                 Outputs o{test::poisoned(static_cast<size_t>(rows)), test::poisoned(x.size()), {0.0f},
                           test::poisoned(static_cast<size_t>(rows)), test::poisoned(static_cast<size_t>(rows))};
                 o[2][0] = static_cast<float>(
                     softmax_cross_entropy_forward(x.data(), targets.data(), o[0].data(), rows, cols));
                 softmax_cross_entropy_backward_shard(x.data(), targets.data(), 0, o[0].data(), 0.01f, o[1].data(),
                                                      rows, cols, cols, cols - 7);
                 cross_entropy_shard_max(x.data(), o[3].data(), rows, cols, cols - 7);
                 cross_entropy_shard_sum_exp(x.data(), o[3].data(), o[4].data(), rows, cols, cols - 7);
                 return o;
               }});
  c.push_back({"embedding", [] {
                 const int64_t tokens = 500, dim = 300, vocab = 97;  // repeated ids; dim spans two column blocks
                 const auto ids = random_ids(static_cast<size_t>(tokens), static_cast<int32_t>(vocab), 4);
                 const auto table = test::random_floats(static_cast<size_t>(vocab * dim), 5);
                 const auto dout = test::random_floats(static_cast<size_t>(tokens * dim), 6);
                 Outputs o{test::poisoned(dout.size()), test::random_floats(table.size(), 7),
                           test::random_floats(table.size(), 8)};
                 embedding_forward_shard(ids.data(), table.data(), o[0].data(), tokens, dim, vocab, 10, 60);
                 embedding_backward(ids.data(), dout.data(), o[1].data(), tokens, dim);
                 embedding_backward_shard(ids.data(), dout.data(), o[2].data(), tokens, dim, 10, 60);
                 return o;
               }});
  c.push_back({"position_embedding", [] {
                 const int64_t B = 5, T = 70, D = 130;
                 const auto pos = test::random_floats(static_cast<size_t>(T * D), 9);
                 const auto dx = test::random_floats(static_cast<size_t>(B * T * D), 10);
                 Outputs o{test::random_floats(dx.size(), 11), test::random_floats(pos.size(), 12)};
                 position_embedding_forward(o[0].data(), pos.data(), B, T, D);
                 position_embedding_backward(dx.data(), o[1].data(), B, T, D);
                 return o;
               }});
  c.push_back({"bias_and_layernorm_weight_gradients", [=] {
                 const auto mean = test::random_floats(static_cast<size_t>(rows), 13);
                 const auto rstd = test::random_floats(static_cast<size_t>(rows), 14, 2.0f);
                 Outputs o{test::random_floats(static_cast<size_t>(cols), 15),
                           test::random_floats(static_cast<size_t>(cols), 16),
                           test::random_floats(static_cast<size_t>(cols), 17)};
                 bias_backward(dy.data(), o[0].data(), rows, cols);
                 layernorm_backward_weight(dy.data(), x.data(), mean.data(), rstd.data(), o[1].data(), o[2].data(),
                                           rows, cols);
                 return o;
               }});
  c.push_back({"sgd_momentum_and_sum_squares", [=] {
                 Outputs o{x, test::random_floats(x.size(), 18), {0.0f}};
                 sgd_update(o[0].data(), dy.data(), o[1].data(), static_cast<int64_t>(x.size()), 0.1f, 0.9f, 0.01f,
                            true, false);
                 o[2][0] = static_cast<float>(sum_squares(o[0].data(), static_cast<int64_t>(o[0].size())) * 1e-3);
                 return o;
               }});
  c.push_back({"moe", [] {
                 const int64_t tokens = 200, k = 2, d = 170, n_rows = tokens * k;
                 const auto xs = test::random_floats(static_cast<size_t>(tokens * d), 19);
                 const auto index = random_ids(static_cast<size_t>(n_rows), static_cast<int32_t>(tokens), 20);
                 const auto scale = test::random_floats(static_cast<size_t>(n_rows), 21);
                 const auto where = random_ids(static_cast<size_t>(n_rows), static_cast<int32_t>(n_rows), 22);
                 const auto weight = test::random_floats(static_cast<size_t>(n_rows), 23);
                 const auto g = test::random_floats(static_cast<size_t>(tokens * d), 24);
                 Outputs o{test::poisoned(static_cast<size_t>(n_rows * d)), test::poisoned(g.size()),
                           test::poisoned(static_cast<size_t>(n_rows))};
                 moe_gather(xs.data(), index.data(), scale.data(), o[0].data(), n_rows, tokens, d);
                 moe_combine(o[0].data(), where.data(), weight.data(), o[1].data(), tokens, k, n_rows, d);
                 moe_combine_weight_grad(g.data(), o[0].data(), where.data(), o[2].data(), tokens, k, n_rows, d);
                 return o;
               }});
  c.push_back({"attention_merge", [] {
                 const int64_t batch = 3, len = 70, heads = 4, hd = 40, n = batch * len * heads * hd;
                 const auto a = test::random_floats(static_cast<size_t>(n), 25);
                 const auto b = test::random_floats(static_cast<size_t>(n), 26);
                 auto la = test::random_floats(static_cast<size_t>(batch * heads * len), 27, 4.0f);
                 const auto lb = test::random_floats(la.size(), 28, 4.0f);
                 la[3] = -std::numeric_limits<float>::infinity();
                 Outputs o{test::poisoned(a.size()), test::poisoned(la.size())};
                 attention_merge(a.data(), la.data(), b.data(), lb.data(), o[0].data(), o[1].data(), batch, len, heads,
                                 hd);
                 return o;
               }});
  c.push_back({"conv2d_and_maxpool", [] {
                 Conv2dShape s;
                 s.batch = 2, s.in_channels = 3, s.height = 30, s.width = 29, s.out_channels = 5, s.kernel = 3;
                 s.stride = 1, s.padding = 1;
                 const int64_t out = s.batch * s.out_channels * s.out_height() * s.out_width();
                 const auto xs = test::random_floats(static_cast<size_t>(s.batch * s.in_channels * 30 * 29), 29);
                 const auto w = test::random_floats(static_cast<size_t>(5 * 3 * 9), 30);
                 const auto bias = test::random_floats(5, 31);
                 const auto g = test::random_floats(static_cast<size_t>(out), 32);
                 std::vector<float> ws(static_cast<size_t>(conv2d_workspace_floats(s)));
                 const int64_t N = 2, C = 5, H = 30, W = 29, pooled = N * C * 15 * 14;  // the conv's output, pooled
                 Outputs o{test::poisoned(static_cast<size_t>(out)), test::poisoned(xs.size()),
                           test::poisoned(static_cast<size_t>(pooled + N * C * H * W))};
                 conv2d_forward(s, xs.data(), w.data(), bias.data(), o[0].data(), ws.data(), GemmSlicing::kShapeFixed);
                 conv2d_backward_input(s, g.data(), w.data(), o[1].data(), ws.data(), GemmSlicing::kShapeFixed);
                 std::vector<int32_t> argmax(static_cast<size_t>(pooled));
                 maxpool2d_forward(o[0].data(), o[2].data(), argmax.data(), N, C, H, W, 2, 2);
                 maxpool2d_backward(o[2].data(), argmax.data(), o[2].data() + pooled, N, C, H, W, 2, 2);
                 return o;
               }});
  return c;
}

bool same_bits(const Outputs& a, const Outputs& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TEST(ParallelKernels, OneThreadTwoThreadsAndInsideARegionGiveTheSameBits) {
  const int saved = omp_get_max_threads();
  for (const Case& c : cases()) {
    omp_set_num_threads(1);
    const Outputs one = c.run();
    omp_set_num_threads(2);
    const Outputs two = c.run();
    Outputs nested;
    bool active = false;
#pragma omp parallel num_threads(2)
    {
#pragma omp master
      {
        active = omp_in_parallel();  // false only when the runtime gave the region one thread
        nested = c.run();
      }
    }
    omp_set_num_threads(saved);
    double norm = 0.0;
    for (const auto& v : one) {
      norm += test::l2_norm(v);
      for (float f : v) ASSERT_FALSE(std::isnan(f)) << c.name << ": an output element was not written";
    }
    EXPECT_GT(norm, 0.0) << c.name;
    EXPECT_TRUE(same_bits(one, two)) << c.name << ": 1 against 2 threads";
    EXPECT_TRUE(same_bits(one, nested)) << c.name << ": 1 thread against the loop inside an active region";
    EXPECT_TRUE(active) << c.name << ": the runtime gave the 2-thread region one thread, so the plain-loop branch "
                        << "was not exercised (OMP_THREAD_LIMIT or OMP_DYNAMIC set?)";
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::parallel_kernels_test
