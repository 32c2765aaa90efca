// Vocab-parallel softmax cross-entropy on the CPU. The row loops use the same vectorised exp as
// kernels/cpu/cross_entropy.cpp, so a tp run differs from the single-rank loss only by summation order.
// Two all-reduces per forward (max, then sum-exp and target logit together); none in backward.
#include "layers/parallel/vocab_parallel_cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {

namespace kd = kernels::cpu::detail;

namespace {
constexpr const char* kWho = "vocab_parallel_cross_entropy";
}  // namespace

VocabParallelCrossEntropy::VocabParallelCrossEntropy(std::int64_t vocab_size, int tp_size, int tp_rank)
    : vocab_(vocab_size), tp_size_(tp_size), tp_rank_(tp_rank) {
  check_tp_coordinates(tp_size, tp_rank, kWho);
  CLEAVE_CHECK(vocab_size > 0, "{}: vocab_size must be > 0, got {}", kWho, vocab_size);
  local_ = (vocab_size + tp_size - 1) / tp_size;
  first_ = local_ * tp_rank;
  valid_ = std::clamp<std::int64_t>(vocab_size - first_, 0, local_);
}

Tensor VocabParallelCrossEntropy::forward(const Tensor& logits, Stash& stash, Context& ctx) {
  check_input(logits, DType::kF32, local_, 1, kWho);
  const std::int64_t rows = logits.shape().rows();
  CLEAVE_CHECK(ctx.targets.defined(), "{}: no targets in the context (Context::targets)", kWho);
  CLEAVE_CHECK(ctx.targets.dtype() == DType::kI32 && ctx.targets.numel() == rows,
               "{}: expected {} i32 targets for logits {}, got {} {}", kWho, rows, logits.shape().str(),
               ctx.targets.shape().str(), dtype_name(ctx.targets.dtype()));
  tp_group(ctx, tp_size_, tp_rank_, kWho);
  const std::int32_t* targets = ctx.targets.data<std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    CLEAVE_CHECK(targets[r] >= -1 && targets[r] < vocab_,
                 "{}: target {} at row {} is out of range [0, {}) (vocab_size {}; -1 marks an ignored row)", kWho,
                 targets[r], r, vocab_, vocab_);
  }
  const float* x = logits.data<float>();
  const std::int64_t cols = local_, valid = valid_, first = first_;

  Tensor row_max = new_workspace(ctx, Shape{rows});
  float* mx = row_max.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    mx[r] = valid > 0 ? kd::max_of(x + r * cols, valid) : -std::numeric_limits<float>::infinity();
  }
  tp_all_reduce(row_max, comm::ReduceOp::kMax, ctx, tp_size_, tp_rank_, kWho);

  Tensor sums = new_workspace(ctx, Shape{2, rows});  // row 0: Σ exp(x - max); row 1: the target logit
  float* sum_exp = sums.data<float>();
  float* target_logit = sum_exp + rows;
#pragma omp parallel for schedule(static) if (kd::worth_parallel(rows * cols))
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    sum_exp[r] = valid > 0 ? kd::exp_sum(xr, mx[r], valid) : 0.0f;
    const std::int64_t local = static_cast<std::int64_t>(targets[r]) - first;
    target_logit[r] = targets[r] >= 0 && local >= 0 && local < valid ? xr[local] : 0.0f;
  }
  tp_all_reduce(sums, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, kWho);

  Tensor lse = new_activation(ctx, Shape{rows});
  double total = 0.0;  // row order, as the single-rank kernel
  for (std::int64_t r = 0; r < rows; ++r) {
    const float row_lse = mx[r] + std::log(sum_exp[r]);
    lse.data<float>()[r] = row_lse;
    if (targets[r] >= 0) total += static_cast<double>(row_lse) - static_cast<double>(target_logit[r]);
  }
  const std::int64_t n_valid = kernels::cpu::count_valid_targets(targets, rows);
  Tensor loss = new_activation(ctx, Shape{});
  loss.data<float>()[0] = n_valid > 0 ? static_cast<float>(total / static_cast<double>(n_valid)) : 0.0f;
  stash.tensors = {logits, ctx.targets, lse};
  return loss;
}

Tensor VocabParallelCrossEntropy::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor logits = stash_at(stash, 0, kWho);
  const Tensor targets = stash_at(stash, 1, kWho);
  const Tensor lse = stash_at(stash, 2, kWho);
  CLEAVE_CHECK(dy.defined() && dy.numel() == 1 && dy.dtype() == DType::kF32,
               "{}: dy must be one f32 element (the loss scale)", kWho);
  const std::int64_t rows = logits.shape().rows(), cols = local_, valid = valid_, first = first_;
  const std::int32_t* t = targets.data<std::int32_t>();
  const std::int64_t n_valid = kernels::cpu::count_valid_targets(t, rows);
  const float scale = n_valid > 0 ? dy.data<float>()[0] / static_cast<float>(n_valid) : 0.0f;
  Tensor dlogits = new_activation(ctx, logits.shape());
  const float* x = logits.data<float>();
  const float* row_lse = lse.data<float>();
  float* dx = dlogits.data<float>();
#pragma omp parallel for schedule(static) if (kd::worth_parallel(rows * cols))
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* dr = dx + r * cols;
    std::fill(dr + (t[r] >= 0 ? valid : 0), dr + cols, 0.0f);  // padding columns and ignored rows
    if (t[r] < 0) continue;
    kd::exp_scale_store(xr, row_lse[r], scale, dr, valid);
    const std::int64_t local = static_cast<std::int64_t>(t[r]) - first;
    if (local >= 0 && local < valid) dr[local] = scale * (kd::exp_scalar(xr[local] - row_lse[r]) - 1.0f);
  }
  stash.clear();
  return dlogits;
}

}  // namespace cleave::layers
