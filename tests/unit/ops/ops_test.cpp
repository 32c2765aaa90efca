// The seam's CPU backend against its references: vocab-parallel pieces over padded shards combine to the fused
// loss, gradient and arg-max of the whole vocabulary (what tensor-parallel evaluation relies on), and bf16
// tensors are widened and narrowed at the kernel edges (the GEMM of bf16 operands equals the f32 GEMM of the
// rounded operands, rounded once). The multi-tensor optimizer updates equal the single-tensor ops on each item in
// turn (a bf16 grad included), through the CPU slot and through the per-item slot other backends use; so does the
// gradient clip's multi-tensor scale (a bf16 tensor included).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/ops/backend.hpp"

#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::ops_test {
namespace {

using cleave::kernels::test::random_floats;

Tensor f32(const std::vector<float>& v, const Shape& shape) { return Tensor::from_floats(v, shape); }

TEST(OpsCrossEntropy, PaddedVocabShardsCombineToTheFusedLossGradientAndArgmax) {
  const Context ctx;
  const std::int64_t rows = 7, vocab = 23, tp = 3, width = (vocab + tp - 1) / tp;  // 8 wide, last shard 7 valid
  const auto logits = random_floats(static_cast<size_t>(rows * vocab), 11, 3.0f);
  std::vector<std::int32_t> target_values{0, 22, 5, -1, 16, 8, 15};
  Tensor targets = Tensor::empty({rows}, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  std::copy(target_values.begin(), target_values.end(), targets.data<std::int32_t>());

  // Reference: the fused ops on the whole vocabulary.
  const Tensor whole = f32(logits, {rows, vocab});
  Tensor lse = Tensor::empty({rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor loss = Tensor::empty({1}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  cross_entropy_forward(ctx, whole, targets, lse, loss);
  Tensor dloss = f32({0.5f}, {1});
  Tensor dwhole = Tensor::empty({rows, vocab}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  cross_entropy_backward(ctx, whole, targets, lse, dloss, dwhole, {0, vocab, vocab});
  EXPECT_GT(loss.to_floats()[0], 0.0f);

  // Shards: columns [r*width, r*width + valid) of each row, padding columns poisoned with huge logits.
  std::vector<Tensor> shards;
  std::vector<VocabRange> ranges;
  for (std::int64_t r = 0; r < tp; ++r) {
    const std::int64_t first = r * width, valid = std::min(width, vocab - first);
    std::vector<float> v(static_cast<size_t>(rows * width), 1e30f);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t c = 0; c < valid; ++c) v[static_cast<size_t>(i * width + c)] = logits[static_cast<size_t>(i * vocab + first + c)];
    }
    shards.push_back(f32(v, {rows, width}));
    ranges.push_back({first, valid, vocab});
  }
  // "all-reduce" by hand: max, then sums.
  Tensor row_max = Tensor::empty({rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  std::vector<float> mx(static_cast<size_t>(rows), -INFINITY);
  for (std::int64_t r = 0; r < tp; ++r) {
    cross_entropy_shard_max(ctx, shards[static_cast<size_t>(r)], ranges[static_cast<size_t>(r)], row_max);
    for (std::int64_t i = 0; i < rows; ++i) mx[static_cast<size_t>(i)] = std::max(mx[static_cast<size_t>(i)], row_max.data<float>()[i]);
  }
  const Tensor reduced_max = f32(mx, {rows});
  std::vector<float> sums(static_cast<size_t>(2 * rows), 0.0f), neg_index(static_cast<size_t>(rows), -INFINITY);
  Tensor piece = Tensor::empty({2, rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor index_piece = Tensor::empty({rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t r = 0; r < tp; ++r) {
    cross_entropy_shard_sum_exp_and_target(ctx, shards[static_cast<size_t>(r)], targets, ranges[static_cast<size_t>(r)], reduced_max, piece);
    for (std::int64_t i = 0; i < 2 * rows; ++i) sums[static_cast<size_t>(i)] += piece.data<float>()[i];
    cross_entropy_shard_argmax(ctx, shards[static_cast<size_t>(r)], ranges[static_cast<size_t>(r)], reduced_max, index_piece);
    for (std::int64_t i = 0; i < rows; ++i) neg_index[static_cast<size_t>(i)] = std::max(neg_index[static_cast<size_t>(i)], index_piece.data<float>()[i]);
  }
  Tensor shard_lse = Tensor::empty({rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor shard_loss = Tensor::empty({1}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  cross_entropy_loss(ctx, reduced_max, f32(sums, {2, rows}), targets, shard_lse, shard_loss);
  EXPECT_NEAR(shard_loss.to_floats()[0], loss.to_floats()[0], 1e-5f * loss.to_floats()[0]);

  // Arg-max: the first maximum of each row over the whole vocabulary.
  const CorrectCount count = count_correct(ctx, f32(neg_index, {rows}), targets);
  std::int64_t expected_correct = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* row = logits.data() + i * vocab;
    const auto best = std::max_element(row, row + vocab) - row;
    EXPECT_EQ(-neg_index[static_cast<size_t>(i)], static_cast<float>(best)) << "row " << i;
    if (target_values[static_cast<size_t>(i)] >= 0 && best == target_values[static_cast<size_t>(i)]) ++expected_correct;
  }
  EXPECT_EQ(count.rows, rows - 1);  // one ignored row
  EXPECT_EQ(count.correct, expected_correct);

  // Gradients: each shard's valid columns match the fused gradient; padding columns are exactly zero.
  for (std::int64_t r = 0; r < tp; ++r) {
    const VocabRange& range = ranges[static_cast<size_t>(r)];
    Tensor d = Tensor::empty({rows, width}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    cross_entropy_backward(ctx, shards[static_cast<size_t>(r)], targets, shard_lse, dloss, d, range);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t c = 0; c < width; ++c) {
        const float got = d.data<float>()[i * width + c];
        if (c >= range.valid) {
          EXPECT_EQ(got, 0.0f);
        } else {
          EXPECT_NEAR(got, dwhole.data<float>()[i * vocab + range.first + c], 1e-6f);
        }
      }
    }
  }
}

Tensor to_bf16(const Context& ctx, const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::kBF16, MemoryCategory::kActivations, cpu_allocator());
  copy(ctx, t, out);
  return out;
}

// The widening path (device.blas "openblas"; the bf16 kernels of onednn: cpu_blas_test.cpp).
TEST(OpsBf16, GemmWidensAtTheEdgesAndAccumulatesInF32) {
  Context ctx;
  ctx.cpu_blas = CpuBlas::kOpenBlas;
  const std::int64_t m = 37, n = 29, k = 53;
  const Tensor a = f32(random_floats(static_cast<size_t>(m * k), 1), {m, k});
  const Tensor b = f32(random_floats(static_cast<size_t>(n * k), 2), {n, k});
  const Tensor a16 = to_bf16(ctx, a), b16 = to_bf16(ctx, b);
  // Reference: the f32 GEMM of the bf16-rounded operands.
  Tensor a_rounded = Tensor::empty({m, k}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor b_rounded = Tensor::empty({n, k}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  copy(ctx, a16, a_rounded);
  copy(ctx, b16, b_rounded);
  GemmOptions transposed_b;
  transposed_b.trans_b = true;
  Tensor want = Tensor::empty({m, n}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  gemm(ctx, a_rounded, b_rounded, want, transposed_b);
  // f32 output from bf16 operands: bit for bit the reference.
  Tensor got = Tensor::empty({m, n}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  gemm(ctx, a16, b16, got, transposed_b);
  EXPECT_EQ(got.to_floats(), want.to_floats());
  // bf16 output: the reference rounded once.
  Tensor got16 = Tensor::empty({m, n}, DType::kBF16, MemoryCategory::kActivations, cpu_allocator());
  gemm(ctx, a16, b16, got16, transposed_b);
  const auto narrowed = to_bf16(ctx, want).to_floats();
  EXPECT_EQ(got16.to_floats(), narrowed);
  double norm = 0;
  for (float v : narrowed) norm += static_cast<double>(v) * v;
  EXPECT_GT(norm, 0.0);
  // The rounding is real: bf16 operands differ from the f32 ones.
  EXPECT_NE(a_rounded.to_floats(), a.to_floats());
}

// Items of 37, 20000 (a bf16 grad) and 70001 elements, decay on two of them; three steps at 1 and 2 threads.
TEST(OpsOptim, ManyEqualsEachItemInTurn) {
  const Context ctx;
  const int saved = omp_get_max_threads();
  const std::vector<std::int64_t> sizes = {37, 20000, 70001};
  auto fresh = [&](std::uint64_t seed) {
    std::vector<Tensor> t;
    for (std::size_t i = 0; i < sizes.size(); ++i) t.push_back(f32(random_floats(sizes[i], seed + i), {sizes[i]}));
    return t;
  };
  std::vector<Tensor> grads = fresh(10);
  grads[1] = Tensor::empty(grads[1].shape(), DType::kBF16, MemoryCategory::kActivations, cpu_allocator());
  copy(ctx, f32(random_floats(sizes[1], 99), {sizes[1]}), grads[1]);
  auto zeros = [&] {
    std::vector<Tensor> t;
    for (std::int64_t n : sizes) t.push_back(f32(std::vector<float>(static_cast<std::size_t>(n), 0.0f), {n}));
    return t;
  };
  const float decay[] = {0.1f, 0.0f, 0.05f};
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    // [0]: the single-tensor ops; [1]: the multi-tensor op; [2]: the per-item slot (detail::*_each).
    std::vector<Tensor> params[3] = {fresh(1), fresh(1), fresh(1)}, m[3] = {zeros(), zeros(), zeros()},
                        v[3] = {zeros(), zeros(), zeros()};
    for (std::int64_t step = 1; step <= 3; ++step) {
      std::vector<AdamWItem> items[3];
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        adamw_update(ctx, params[0][i], grads[i], m[0][i], v[0][i],
                     {.lr = 1e-2f, .weight_decay = decay[i], .step = step});
        for (int k : {1, 2}) items[k].push_back({params[k][i], grads[i], m[k][i], v[k][i], decay[i]});
      }
      const AdamWHyper hyper{.lr = 1e-2f, .weight_decay = 123.0f, .step = step};  // weight_decay: not read
      adamw_update_many(ctx, items[1], hyper);
      detail::adamw_update_each(ctx, items[2], hyper);
    }
    for (int k : {1, 2}) {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        const std::string at = "adamw path " + std::to_string(k) + " item " + std::to_string(i) + " threads " +
                               std::to_string(threads);
        EXPECT_TRUE(kernels::test::same_bits(params[k][i].to_floats(), params[0][i].to_floats())) << at;
        EXPECT_TRUE(kernels::test::same_bits(v[k][i].to_floats(), v[0][i].to_floats())) << at;
      }
    }
    // SGD with Nesterov momentum.
    std::vector<Tensor> sp[3] = {fresh(2), fresh(2), fresh(2)}, buf[3] = {zeros(), zeros(), zeros()};
    for (int step = 0; step < 3; ++step) {
      std::vector<SgdItem> items[3];
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        sgd_update(ctx, sp[0][i], grads[i], buf[0][i],
                   {.lr = 0.05f, .momentum = 0.9f, .weight_decay = decay[i], .nesterov = true, .first_step = step == 0});
        for (int k : {1, 2}) items[k].push_back({sp[k][i], grads[i], buf[k][i], decay[i]});
      }
      const SgdHyper hyper{.lr = 0.05f, .momentum = 0.9f, .nesterov = true, .first_step = step == 0};
      sgd_update_many(ctx, items[1], hyper);
      detail::sgd_update_each(ctx, items[2], hyper);
    }
    for (int k : {1, 2}) {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        const std::string at = "sgd path " + std::to_string(k) + " item " + std::to_string(i) + " threads " +
                               std::to_string(threads);
        EXPECT_TRUE(kernels::test::same_bits(sp[k][i].to_floats(), sp[0][i].to_floats())) << at;
        EXPECT_TRUE(kernels::test::same_bits(buf[k][i].to_floats(), buf[0][i].to_floats())) << at;
      }
    }
  }
  omp_set_num_threads(saved);
  // The per-item checks name the multi-tensor op.
  std::vector<AdamWItem> bad = {{fresh(1)[0], grads[1], zeros()[0], zeros()[0], 0.0f}};
  test::expect_error([&] { adamw_update_many(ctx, bad, {.lr = 1e-2f}); }, "adamw_update_many");
}

// Tensors of 37, 20000 (bf16), 70001 and 0 elements at 1 and 2 threads: scale_inplace_many, and the per-item slot
// (detail::scale_inplace_each, what CUDA fills the slot with), equal scale_inplace on each tensor in turn.
TEST(OpsScale, ManyEqualsEachTensorInTurn) {
  const Context ctx;
  const int saved = omp_get_max_threads();
  const std::vector<std::int64_t> sizes = {37, 20000, 70001, 0};
  auto fresh = [&] {
    std::vector<Tensor> t;
    for (std::size_t i = 0; i < sizes.size(); ++i) t.push_back(f32(random_floats(sizes[i], 40 + i), {sizes[i]}));
    Tensor b = Tensor::empty({sizes[1]}, DType::kBF16, MemoryCategory::kGradients, cpu_allocator());
    copy(ctx, t[1], b);
    t[1] = b;
    return t;
  };
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<Tensor> ys[3] = {fresh(), fresh(), fresh()};  // [0] one op per tensor, [1] the many op, [2] each
    for (const Tensor& y : ys[0]) scale_inplace(ctx, y, 0.61f);
    scale_inplace_many(ctx, ys[1], 0.61f);
    detail::scale_inplace_each(ctx, ys[2], 0.61f);
    const std::vector<Tensor> start = fresh();
    for (int k : {1, 2}) {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        const std::string at = "path " + std::to_string(k) + " tensor " + std::to_string(i) + " threads " +
                               std::to_string(threads);
        EXPECT_TRUE(kernels::test::same_bits(ys[k][i].to_floats(), ys[0][i].to_floats())) << at;
        if (sizes[i] > 0) {
          EXPECT_FALSE(kernels::test::same_bits(ys[k][i].to_floats(), start[i].to_floats())) << at;
        }
      }
    }
  }
  omp_set_num_threads(saved);
  const std::vector<Tensor> bad = {f32({1.0f}, {1}), Tensor::zeros({2}, DType::kI32, MemoryCategory::kActivations,
                                                                    cpu_allocator())};
  test::expect_error([&] { scale_inplace_many(ctx, bad, 2.0f); }, "scale_inplace_many");
}

}  // namespace
}  // namespace cleave::ops::ops_test
