// Fused softmax cross-entropy against a double reference: the summed loss over non-ignored rows, every
// row's logsumexp, the gradient scale*(softmax - onehot) with zero rows for ignored targets, finite
// differences of the forward, in-place (dlogits aliasing logits) giving the same bits, stability for
// huge logits, vocab-parallel shard pieces combining to the fused result, and out-of-range targets
// raising cleave::Error with the row, target and class count. bf16 logits (converted a row at a time) give the
// bits of the f32 kernels over the widened tensor, outputs narrowed, at 1 and 2 threads.
#include "kernels/cpu/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::cross_entropy_test {
namespace {

std::vector<int32_t> make_targets(int64_t rows, int64_t classes, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[r] = static_cast<int32_t>((r * 7919 + seed) % classes);
  if (rows > 2) t[1] = -1;  // an ignored (padding) row
  return t;
}

TEST(KernelCrossEntropy, ForwardBackwardMatchReference) {
  for (auto [rows, classes] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {13, 65}, {7, 1001}, {37, 4099}}) {
    auto logits = test::random_floats(static_cast<size_t>(rows * classes), 50, 4.0f);
    const auto targets = make_targets(rows, classes, 3);
    auto lse = test::poisoned(static_cast<size_t>(rows));
    const double loss = softmax_cross_entropy_forward(logits.data(), targets.data(), lse.data(), rows, classes);

    std::vector<double> want_lse(static_cast<size_t>(rows)), want_grad(logits.size());
    double want_loss = 0.0;
    const float scale = 0.37f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = &logits[r * classes];
      double mx = x[0];
      for (int64_t c = 1; c < classes; ++c) mx = std::max(mx, double(x[c]));
      double s = 0.0;
      for (int64_t c = 0; c < classes; ++c) s += std::exp(x[c] - mx);
      want_lse[r] = mx + std::log(s);
      if (targets[r] >= 0) want_loss += want_lse[r] - x[targets[r]];
      for (int64_t c = 0; c < classes; ++c) {
        want_grad[r * classes + c] =
            targets[r] < 0 ? 0.0 : scale * (std::exp(x[c] - want_lse[r]) - (c == targets[r] ? 1.0 : 0.0));
      }
    }
    EXPECT_NEAR(loss, want_loss, 1e-5 * (1.0 + std::fabs(want_loss)));
    test::expect_close(lse, want_lse, 1e-5, 1e-6, "lse");
    if (classes > 1) {
      EXPECT_GT(loss, 0.0);
    }

    auto grad = test::poisoned(logits.size());
    softmax_cross_entropy_backward(logits.data(), targets.data(), lse.data(), scale, grad.data(), rows, classes);
    test::expect_close(grad, want_grad, 1e-7, 1e-4, "dlogits");
    if (classes > 1) {
      EXPECT_GT(test::l2_norm(grad), 0.0);
    }

    // In place: dlogits aliasing logits gives the same bits.
    auto inplace = logits;
    softmax_cross_entropy_backward(inplace.data(), targets.data(), lse.data(), scale, inplace.data(), rows, classes);
    EXPECT_EQ(inplace, grad);

    // Finite differences of scale * loss (a sample of logits).
    std::vector<float> lse_fd(static_cast<size_t>(rows));
    auto f = [&] {
      return scale * softmax_cross_entropy_forward(logits.data(), targets.data(), lse_fd.data(), rows, classes);
    };
    for (size_t i = 0; i < logits.size(); i += 1 + logits.size() / 10) {
      const double fd = test::finite_difference(logits, i, 1e-2f, f);
      EXPECT_NEAR(grad[i], fd, 1e-3 * (1.0 + std::fabs(fd))) << "logit " << i;
    }
  }
}

TEST(KernelCrossEntropy, VocabShardsCombineToTheFusedKernel) {
  const int64_t rows = 13, shard = 37, shards = 3, classes = shard * shards;
  const auto logits = test::random_floats(static_cast<size_t>(rows * classes), 52, 4.0f);
  const auto targets = make_targets(rows, classes, 5);
  std::vector<float> lse(static_cast<size_t>(rows));
  const double fused = softmax_cross_entropy_forward(logits.data(), targets.data(), lse.data(), rows, classes);
  std::vector<float> grad(logits.size());
  softmax_cross_entropy_backward(logits.data(), targets.data(), lse.data(), 0.5f, grad.data(), rows, classes);

  // Each shard holds columns [s*shard, (s+1)*shard) as its own contiguous [rows, shard] tensor.
  std::vector<std::vector<float>> local(shards);
  for (int64_t s = 0; s < shards; ++s)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < shard; ++c) local[s].push_back(logits[r * classes + s * shard + c]);
  std::vector<float> row_max(static_cast<size_t>(rows), -1e30f), sum_exp(static_cast<size_t>(rows), 0.0f),
      target_logit(static_cast<size_t>(rows), 0.0f), piece(static_cast<size_t>(rows));
  for (int64_t s = 0; s < shards; ++s) {  // "all-reduce max"
    cross_entropy_shard_max(local[s].data(), piece.data(), rows, shard);
    for (int64_t r = 0; r < rows; ++r) row_max[r] = std::max(row_max[r], piece[r]);
  }
  for (int64_t s = 0; s < shards; ++s) {  // "all-reduce sum" of exp sums and target logits
    cross_entropy_shard_sum_exp(local[s].data(), row_max.data(), piece.data(), rows, shard);
    for (int64_t r = 0; r < rows; ++r) sum_exp[r] += piece[r];
    cross_entropy_shard_target_logit(local[s].data(), targets.data(), s * shard, piece.data(), rows, shard, classes);
    for (int64_t r = 0; r < rows; ++r) target_logit[r] += piece[r];
  }
  std::vector<float> shard_lse(static_cast<size_t>(rows));
  double loss = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    shard_lse[r] = row_max[r] + std::log(sum_exp[r]);
    if (targets[r] >= 0) loss += double(shard_lse[r]) - target_logit[r];
  }
  EXPECT_NEAR(loss, fused, 1e-5 * std::fabs(fused));
  test::expect_close(shard_lse, lse, 1e-6, 1e-6, "lse from shards");
  for (int64_t s = 0; s < shards; ++s) {
    auto g = test::poisoned(local[s].size());
    softmax_cross_entropy_backward_shard(local[s].data(), targets.data(), s * shard, shard_lse.data(), 0.5f, g.data(),
                                         rows, shard, classes);
    for (int64_t r = 0; r < rows; ++r)
      test::expect_close(&g[r * shard], &grad[r * classes + s * shard], static_cast<size_t>(shard), 1e-7, 1e-5,
                         "shard " + std::to_string(s) + " row " + std::to_string(r));
    EXPECT_GT(test::l2_norm(g), 0.0);
  }
  const std::vector<int32_t> bad = {static_cast<int32_t>(classes)};
  EXPECT_THROW(cross_entropy_shard_target_logit(local[0].data(), bad.data(), 0, piece.data(), 1, shard, classes),
               Error);
}

// Every kernel over bf16 logits against the f32 kernel over the exactly widened logits: lse, the loss, the shard
// pieces (padding columns, a class offset with targets in and out of the shard) and the gradient stored as bf16
// (into its own tensor and in place) or as f32, bit for bit. Shapes: one class, rows shorter than a vector, a
// vocabulary that is no multiple of a vector, and one large enough to be worth a team.
TEST(KernelCrossEntropy, Bf16RowsGiveTheWidenedF32Bits) {
  for (auto [rows, classes] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {13, 65}, {7, 1001}, {37, 4099}}) {
    const auto n = static_cast<size_t>(rows * classes), nr = static_cast<size_t>(rows);
    const auto x16 = test::random_bf16(n, 71, 6.0f);
    const auto x32 = test::widened(x16);
    const auto targets = make_targets(rows, classes, 9);
    const int64_t valid = classes > 3 ? classes - 3 : classes, offset = classes > 3 ? 2 : 0;
    const int64_t total = offset + classes;  // this shard's columns [offset, offset + valid) of `total` classes
    std::vector<int32_t> shard_targets(targets);
    for (auto& t : shard_targets) t = t < 0 ? t : static_cast<int32_t>(t % total);

    std::vector<float> lse_want(nr), max_want(nr), sum_want(nr), target_want(nr), arg_want(nr), g_want(n);
    const double loss_want = softmax_cross_entropy_forward(x32.data(), targets.data(), lse_want.data(), rows, classes);
    cross_entropy_shard_max(x32.data(), max_want.data(), rows, classes, valid);
    cross_entropy_shard_sum_exp(x32.data(), max_want.data(), sum_want.data(), rows, classes, valid);
    cross_entropy_shard_target_logit(x32.data(), shard_targets.data(), offset, target_want.data(), rows, classes,
                                     total, valid);
    cross_entropy_shard_argmax(x32.data(), max_want.data(), offset, arg_want.data(), rows, classes, valid);
    softmax_cross_entropy_backward_shard(x32.data(), shard_targets.data(), offset, lse_want.data(), 0.37f,
                                         g_want.data(), rows, classes, total, valid);
    const auto g16_want = test::narrowed(g_want);
    if (classes > 1) {  // (one class: softmax 1, gradient 0)
      EXPECT_GT(test::l2_norm(g_want), 0.0);
    }

    test::for_each_thread_count({1, 2}, [&](int threads) {
      const std::string at = " [" + std::to_string(rows) + "x" + std::to_string(classes) + "] threads " +
                             std::to_string(threads);
      auto lse = test::poisoned(nr), mx = test::poisoned(nr), sum = test::poisoned(nr), tl = test::poisoned(nr),
           arg = test::poisoned(nr), g32 = test::poisoned(n);
      const double loss = softmax_cross_entropy_forward(x16.data(), targets.data(), lse.data(), rows, classes);
      EXPECT_EQ(std::memcmp(&loss, &loss_want, sizeof loss), 0) << "loss" << at;
      EXPECT_TRUE(test::same_bits(lse, lse_want)) << "lse" << at;
      cross_entropy_shard_max(x16.data(), mx.data(), rows, classes, valid);
      EXPECT_TRUE(test::same_bits(mx, max_want)) << "shard max" << at;
      cross_entropy_shard_sum_exp(x16.data(), max_want.data(), sum.data(), rows, classes, valid);
      EXPECT_TRUE(test::same_bits(sum, sum_want)) << "shard sum_exp" << at;
      cross_entropy_shard_target_logit(x16.data(), shard_targets.data(), offset, tl.data(), rows, classes, total,
                                       valid);
      EXPECT_TRUE(test::same_bits(tl, target_want)) << "shard target logit" << at;
      cross_entropy_shard_argmax(x16.data(), max_want.data(), offset, arg.data(), rows, classes, valid);
      EXPECT_TRUE(test::same_bits(arg, arg_want)) << "shard argmax" << at;

      std::vector<uint16_t> g16(n, 0x7fc1);  // NaN-poisoned
      softmax_cross_entropy_backward_shard(x16.data(), shard_targets.data(), offset, lse_want.data(), 0.37f,
                                           g16.data(), rows, classes, total, valid);
      EXPECT_TRUE(test::same_bits(g16, g16_want)) << "bf16 gradient" << at;
      std::vector<uint16_t> in_place = x16;
      softmax_cross_entropy_backward_shard(in_place.data(), shard_targets.data(), offset, lse_want.data(), 0.37f,
                                           in_place.data(), rows, classes, total, valid);
      EXPECT_TRUE(test::same_bits(in_place, g16_want)) << "bf16 gradient in place" << at;
      softmax_cross_entropy_backward_shard(x16.data(), shard_targets.data(), offset, lse_want.data(), 0.37f,
                                           g32.data(), rows, classes, total, valid);
      EXPECT_TRUE(test::same_bits(g32, g_want)) << "f32 gradient of bf16 logits" << at;
    });
  }
}

TEST(KernelCrossEntropy, HugeLogitsAreStable) {
  std::vector<float> logits = {1000.0f, 999.0f, -1000.0f, 0.0f};
  const std::vector<int32_t> targets = {1};
  float lse = 0.0f;
  const double loss = softmax_cross_entropy_forward(logits.data(), targets.data(), &lse, 1, 4);
  EXPECT_NEAR(loss, 1.0 + std::log1p(std::exp(-1.0)), 1e-4);
  EXPECT_TRUE(std::isfinite(lse));
}

TEST(KernelCrossEntropy, CountValidTargets) {
  const std::vector<int32_t> targets = {3, -1, 0, -1, 7};
  EXPECT_EQ(count_valid_targets(targets.data(), 5), 3);
  EXPECT_EQ(count_valid_targets(targets.data(), 0), 0);
}

TEST(KernelCrossEntropy, OutOfRangeTargetsThrowWithDetails) {
  const auto logits = test::random_floats(3 * 5, 51);
  std::vector<float> lse(3), grad(15);
  for (int32_t bad : {5, 6, -2}) {
    const std::vector<int32_t> targets = {0, bad, 1};
    try {
      softmax_cross_entropy_forward(logits.data(), targets.data(), lse.data(), 3, 5);
      ADD_FAILURE() << "target " << bad << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("target " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("5"), std::string::npos) << msg;
    }
    EXPECT_THROW(softmax_cross_entropy_backward(logits.data(), targets.data(), lse.data(), 1.0f, grad.data(), 3, 5),
                 Error);
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::cross_entropy_test
