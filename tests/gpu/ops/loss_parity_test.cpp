// Seam parity of softmax cross-entropy: ops::cross_entropy_* on cuda:0 against the same call on the CPU backend.
//
// What it asserts, with the tolerance of each (expect_close: |gpu - cpu| <= tol * (|cpu| + max|cpu|)):
//  - fused forward and backward, f32 and bf16 logits, vocabularies 2, 257, 1001 and 50257 (not multiples of 8),
//    rows with ignored targets (-1), a row shifted by +100 (max subtraction), dloss != 1 read from the device:
//    lse and loss 1e-5, dlogits 1e-5 (f32 out) / 1e-2 (bf16 out: one bf16 rounding may differ), in place too;
//  - the vocab-parallel pieces on tensor-parallel shards of a 1001-class vocabulary split 2 and 3 ways
//    (VocabRange with an offset, padding columns beyond `valid`): shard max exact (0), sums and target logits
//    1e-5, lse and loss 1e-5, each shard's dlogits 1e-5 with zero in the padding columns, shard arg-max exact
//    (0, ties included: the first column wins) and count_correct equal;
//  - every row ignored gives loss 0 and an all-zero gradient on both;
//  - a bad target is recorded, not thrown, and ops::check_device_status throws the CPU kernel's message (once).
// Compiled here without a GPU; NOT yet run on one.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "engine/core/error.hpp"
#include "tests/gpu/ops/int_inputs.hpp"
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::loss_parity_test {
namespace {

constexpr double kStatTol = 1e-5;
constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;

class LossParity : public OpsParity {
 protected:
  // Targets in [0, vocab) with every 5th row ignored.
  Tensor targets(std::int64_t rows, std::int64_t vocab) {
    Tensor t = ints_from_uniform(random({rows}, DType::kF32, 0.0f, static_cast<float>(vocab)),
                                 empty_cpu({rows}, DType::kI32), 0, static_cast<std::int32_t>(vocab - 1));
    for (std::int64_t r = 1; r < rows; r += 5) t.data<std::int32_t>()[r] = -1;
    return t;
  }
  Tensor scalar(float v) {
    Tensor t = empty_cpu({1}, DType::kF32);
    t.data<float>()[0] = v;
    return t;
  }
  Tensor dtype_copy(const Tensor& t, DType dtype) {  // CPU tensor `t` in `dtype` (bf16: rounded)
    Tensor out = empty_cpu(t.shape(), dtype);
    ops::copy(cpu(), t, out);
    return out;
  }
};

class FusedLossParity : public LossParity,
                        public ::testing::WithParamInterface<std::tuple<std::int64_t, std::int64_t, DType>> {};

TEST_P(FusedLossParity, ForwardAndBackwardMatchTheCpu) {
  const auto [rows, vocab, dtype] = GetParam();
  Tensor logits = random({rows, vocab}, DType::kF32, -6.0f, 6.0f);
  for (std::int64_t c = 0; c < vocab; ++c) logits.data<float>()[c] += 100.0f;
  logits = dtype_copy(logits, dtype);
  const Tensor tgt = targets(rows, vocab);
  const Tensor dloss = scalar(0.37f);

  Tensor lse = empty_cpu({rows}, DType::kF32), loss = empty_cpu({1}, DType::kF32);
  ops::cross_entropy_forward(cpu(), logits, tgt, lse, loss);
  Tensor dlogits = empty_cpu({rows, vocab}, dtype);
  ops::cross_entropy_backward(cpu(), logits, tgt, lse, dloss, dlogits, {0, vocab, vocab});

  const Tensor g_logits = to_gpu(logits), g_tgt = to_gpu(tgt), g_dloss = to_gpu(dloss);
  Tensor g_lse = poisoned_gpu({rows}, DType::kF32), g_loss = poisoned_gpu({1}, DType::kF32);
  ops::cross_entropy_forward(gpu(), g_logits, g_tgt, g_lse, g_loss);
  expect_close(lse, g_lse, kStatTol, "lse");
  expect_close(loss, g_loss, kStatTol, "loss");

  const Tensor g_lse_cpu = to_gpu(lse);  // the backward on its own inputs
  Tensor g_dlogits = poisoned_gpu({rows, vocab}, dtype);
  ops::cross_entropy_backward(gpu(), g_logits, g_tgt, g_lse_cpu, g_dloss, g_dlogits, {0, vocab, vocab});
  const double tol = dtype == DType::kBF16 ? kBf16Tol : kF32Tol;
  expect_close(dlogits, g_dlogits, tol, "dlogits");
  ops::cross_entropy_backward(gpu(), g_logits, g_tgt, g_lse_cpu, g_dloss, g_logits, {0, vocab, vocab});  // in place
  expect_close(dlogits, g_logits, tol, "dlogits in place");
  EXPECT_NO_THROW(ops::check_device_status(gpu()));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedLossParity,
    ::testing::Values(std::make_tuple(std::int64_t{1}, std::int64_t{2}, DType::kF32),
                      std::make_tuple(std::int64_t{7}, std::int64_t{257}, DType::kF32),
                      std::make_tuple(std::int64_t{300}, std::int64_t{1001}, DType::kF32),
                      std::make_tuple(std::int64_t{5}, std::int64_t{50257}, DType::kF32),
                      std::make_tuple(std::int64_t{33}, std::int64_t{257}, DType::kBF16),
                      std::make_tuple(std::int64_t{9}, std::int64_t{1001}, DType::kBF16)));

// Tensor-parallel shards of `vocab` classes over `parts` ranks, each `width` = ceil(vocab / parts) columns wide
// (the last shards' trailing columns are padding), every piece on both backends with the same inputs.
class ShardedLossParity : public LossParity, public ::testing::WithParamInterface<std::tuple<int, DType>> {};

TEST_P(ShardedLossParity, VocabParallelPiecesMatchTheCpu) {
  const auto [parts, dtype] = GetParam();
  const std::int64_t rows = 37, vocab = 1001;
  const std::int64_t width = (vocab + parts - 1) / parts;
  // The whole row, then one shard per rank (padding columns hold garbage that must not matter).
  Tensor full = random({rows, vocab}, DType::kF32, -4.0f, 4.0f);
  float* f = full.data<float>();
  f[0 * vocab + 3] = f[0 * vocab + 900] = 9.0f;  // row 0: a tie across shards, the first column must win
  f[2 * vocab + 10] = f[2 * vocab + 11] = 9.5f;  // row 2: a tie inside a shard
  Tensor tgt = targets(rows, vocab);
  for (std::int64_t r = 0; r < rows; r += 3) {  // a third of the rows predicted right, so count_correct > 0
    if (tgt.data<std::int32_t>()[r] < 0) continue;
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < vocab; ++c) best = f[r * vocab + c] > f[r * vocab + best] ? c : best;
    tgt.data<std::int32_t>()[r] = static_cast<std::int32_t>(best);
  }
  tgt.data<std::int32_t>()[0] = 3;
  std::vector<Tensor> shards;
  std::vector<ops::VocabRange> ranges;
  for (int p = 0; p < parts; ++p) {
    const std::int64_t first = p * width;
    const std::int64_t valid = std::min(width, vocab - first);
    Tensor s = random({rows, width}, DType::kF32, 50.0f, 60.0f);  // padding: larger than any real logit
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < valid; ++c) s.data<float>()[r * width + c] = f[r * vocab + first + c];
    }
    shards.push_back(dtype_copy(s, dtype));
    ranges.push_back({first, valid, vocab});
  }
  const Tensor g_tgt = to_gpu(tgt);

  // Row max: per shard on both, then the all-reduce max on the host.
  Tensor row_max = empty_cpu({rows}, DType::kF32);
  for (std::int64_t r = 0; r < rows; ++r) row_max.data<float>()[r] = -std::numeric_limits<float>::infinity();
  for (int p = 0; p < parts; ++p) {
    Tensor m = empty_cpu({rows}, DType::kF32);
    ops::cross_entropy_shard_max(cpu(), shards[p], ranges[p], m);
    Tensor g_m = poisoned_gpu({rows}, DType::kF32);
    ops::cross_entropy_shard_max(gpu(), to_gpu(shards[p]), ranges[p], g_m);
    expect_close(m, g_m, 0.0, "shard_max of shard " + std::to_string(p));
    for (std::int64_t r = 0; r < rows; ++r) {
      row_max.data<float>()[r] = std::max(row_max.data<float>()[r], m.data<float>()[r]);
    }
  }
  // Sum of exponentials and target logit: per shard, then the all-reduce sum on the host (in shard order).
  Tensor sums = empty_cpu({2 * rows}, DType::kF32);
  for (std::int64_t i = 0; i < 2 * rows; ++i) sums.data<float>()[i] = 0.0f;
  for (int p = 0; p < parts; ++p) {
    Tensor s = empty_cpu({2 * rows}, DType::kF32);
    ops::cross_entropy_shard_sum_exp_and_target(cpu(), shards[p], tgt, ranges[p], row_max, s);
    Tensor g_s = poisoned_gpu({2 * rows}, DType::kF32);
    ops::cross_entropy_shard_sum_exp_and_target(gpu(), to_gpu(shards[p]), g_tgt, ranges[p], to_gpu(row_max), g_s);
    expect_close(s, g_s, kStatTol, "sum_exp and target logit of shard " + std::to_string(p));
    for (std::int64_t i = 0; i < 2 * rows; ++i) sums.data<float>()[i] += s.data<float>()[i];
  }
  Tensor lse = empty_cpu({rows}, DType::kF32), loss = empty_cpu({1}, DType::kF32);
  ops::cross_entropy_loss(cpu(), row_max, sums, tgt, lse, loss);
  Tensor g_lse = poisoned_gpu({rows}, DType::kF32), g_loss = poisoned_gpu({1}, DType::kF32);
  ops::cross_entropy_loss(gpu(), to_gpu(row_max), to_gpu(sums), g_tgt, g_lse, g_loss);
  expect_close(lse, g_lse, kStatTol, "lse from the pieces");
  expect_close(loss, g_loss, kStatTol, "loss from the pieces");

  const Tensor dloss = scalar(1.25f);
  Tensor neg_index = empty_cpu({rows}, DType::kF32);
  for (std::int64_t r = 0; r < rows; ++r) neg_index.data<float>()[r] = -std::numeric_limits<float>::infinity();
  for (int p = 0; p < parts; ++p) {
    Tensor d = empty_cpu({rows, width}, dtype);
    ops::cross_entropy_backward(cpu(), shards[p], tgt, lse, dloss, d, ranges[p]);
    Tensor g_d = poisoned_gpu({rows, width}, dtype);
    ops::cross_entropy_backward(gpu(), to_gpu(shards[p]), g_tgt, to_gpu(lse), to_gpu(dloss), g_d, ranges[p]);
    expect_close(d, g_d, dtype == DType::kBF16 ? kBf16Tol : kF32Tol, "dlogits of shard " + std::to_string(p));
    const Tensor back = to_cpu(g_d);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = ranges[p].valid; c < width; ++c) {
        ASSERT_EQ(back.to_floats()[r * width + c], 0.0f) << "padding column " << c << " of shard " << p;
      }
    }
    Tensor ni = empty_cpu({rows}, DType::kF32);
    ops::cross_entropy_shard_argmax(cpu(), shards[p], ranges[p], row_max, ni);
    Tensor g_ni = poisoned_gpu({rows}, DType::kF32);
    ops::cross_entropy_shard_argmax(gpu(), to_gpu(shards[p]), ranges[p], to_gpu(row_max), g_ni);
    const Tensor g_ni_cpu = to_cpu(g_ni);
    for (std::int64_t r = 0; r < rows; ++r) {  // -inf where the shard lacks the max: compared as values
      EXPECT_EQ(g_ni_cpu.data<float>()[r], ni.data<float>()[r]) << "neg_index row " << r << " shard " << p;
      neg_index.data<float>()[r] = std::max(neg_index.data<float>()[r], ni.data<float>()[r]);
    }
  }
  EXPECT_EQ(neg_index.data<float>()[0], -3.0f) << "the first of two tied columns is the arg-max";
  const ops::CorrectCount want = ops::count_correct(cpu(), neg_index, tgt);
  const ops::CorrectCount got = ops::count_correct(gpu(), to_gpu(neg_index), g_tgt);
  EXPECT_GT(want.correct, 0);
  EXPECT_EQ(got.correct, want.correct);
  EXPECT_EQ(got.rows, want.rows);
  EXPECT_NO_THROW(ops::check_device_status(gpu()));
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardedLossParity,
                         ::testing::Values(std::make_tuple(2, DType::kF32), std::make_tuple(3, DType::kF32),
                                           std::make_tuple(2, DType::kBF16)));

TEST_F(LossParity, EveryRowIgnoredGivesZeroLossAndGradient) {
  const std::int64_t rows = 6, vocab = 257;
  const Tensor logits = random({rows, vocab}, DType::kF32);
  Tensor tgt = empty_cpu({rows}, DType::kI32);
  for (std::int64_t r = 0; r < rows; ++r) tgt.data<std::int32_t>()[r] = -1;
  Tensor g_lse = poisoned_gpu({rows}, DType::kF32), g_loss = poisoned_gpu({1}, DType::kF32);
  const Tensor g_logits = to_gpu(logits), g_tgt = to_gpu(tgt);
  ops::cross_entropy_forward(gpu(), g_logits, g_tgt, g_lse, g_loss);
  EXPECT_EQ(to_cpu(g_loss).data<float>()[0], 0.0f);
  Tensor g_d = poisoned_gpu({rows, vocab}, DType::kF32);
  ops::cross_entropy_backward(gpu(), g_logits, g_tgt, g_lse, to_gpu(scalar(1.0f)), g_d, {0, vocab, vocab});
  for (float v : to_cpu(g_d).to_floats()) ASSERT_EQ(v, 0.0f);
}

TEST_F(LossParity, BadTargetIsReportedAtTheDeviceStatusCheck) {
  const std::int64_t rows = 9, vocab = 1001;
  const Tensor logits = random({rows, vocab}, DType::kF32);
  Tensor tgt = targets(rows, vocab);
  tgt.data<std::int32_t>()[5] = -4;
  tgt.data<std::int32_t>()[3] = static_cast<std::int32_t>(vocab);
  Tensor g_lse = poisoned_gpu({rows}, DType::kF32), g_loss = poisoned_gpu({1}, DType::kF32);
  EXPECT_NO_THROW(ops::cross_entropy_forward(gpu(), to_gpu(logits), to_gpu(tgt), g_lse, g_loss));  // no sync
  try {
    ops::check_device_status(gpu());
    FAIL() << "a bad target was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 1001 at row 3 is out of range [0, 1001)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ops::check_device_status(gpu())) << "the record is cleared once reported";
}

}  // namespace
}  // namespace cleave::testing::loss_parity_test
