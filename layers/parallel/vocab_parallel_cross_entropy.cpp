// Vocab-parallel softmax cross-entropy over the seam's shard pieces (kernels/ops/ops.hpp), so a tp run
// differs from the single-rank loss only by summation order. Two all-reduces per forward (max, then sum-exp
// and target logit together); none in backward. evaluate() adds one more for the arg-max.
#include "layers/parallel/vocab_parallel_cross_entropy.hpp"


#include <algorithm>

#include "engine/core/error.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {

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

std::int64_t VocabParallelCrossEntropy::check(const Tensor& logits, const Tensor& targets, const Context& ctx) const {
  check_input(ctx, logits, DType::kF32, local_, 1, kWho);
  const std::int64_t rows = logits.shape().rows();
  CLEAVE_CHECK(targets.defined(), "{}: no targets for logits {}", kWho, logits.shape().str());
  CLEAVE_CHECK(targets.dtype() == DType::kI32 && targets.numel() == rows,
               "{}: expected {} i32 targets for logits {}, got {} {}", kWho, rows, logits.shape().str(),
               targets.shape().str(), dtype_name(targets.dtype()));
  tp_group(ctx, tp_size_, tp_rank_, kWho);
  return rows;
}

Tensor VocabParallelCrossEntropy::row_max(const Tensor& logits, Context& ctx) const {
  Tensor mx = new_workspace(ctx, Shape{logits.shape().rows()});
  ops::cross_entropy_shard_max(ctx, logits, range(), mx);
  tp_all_reduce(mx, comm::ReduceOp::kMax, ctx, tp_size_, tp_rank_, kWho);
  return mx;
}

Tensor VocabParallelCrossEntropy::forward(const Tensor& logits, const Tensor& targets, Stash& stash, Context& ctx) {
  const std::int64_t rows = check(logits, targets, ctx);
  const Tensor mx = row_max(logits, ctx);
  Tensor sums = new_workspace(ctx, Shape{2, rows});  // row 0: sum exp(x - max); row 1: the target logit
  ops::cross_entropy_shard_sum_exp_and_target(ctx, logits, targets, range(), mx, sums);
  tp_all_reduce(sums, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, kWho);
  Tensor lse = new_activation(ctx, Shape{rows}, DType::kF32);
  Tensor loss = new_activation(ctx, Shape{}, DType::kF32);
  ops::cross_entropy_loss(ctx, mx, sums, targets, lse, loss);
  stash.tensors = {logits, targets, lse};
  return loss;
}

Tensor VocabParallelCrossEntropy::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor logits = stash_at(stash, 0, kWho);
  const Tensor targets = stash_at(stash, 1, kWho);
  const Tensor lse = stash_at(stash, 2, kWho);
  CLEAVE_CHECK(dy.defined() && dy.numel() == 1 && dy.dtype() == DType::kF32,
               "{}: dy must be one f32 element (the loss scale)", kWho);
  Tensor dlogits = new_activation(ctx, logits.shape());
  ops::cross_entropy_backward(ctx, logits, targets, lse, dy, dlogits, range());
  stash.clear();
  return dlogits;
}

EvalCounts VocabParallelCrossEntropy::evaluate(const Tensor& logits, const Tensor& targets, Context& ctx) {
  Stash scratch;
  const Tensor loss = forward(logits, targets, scratch, ctx);
  const Tensor mx = row_max(logits, ctx);
  Tensor neg_index = new_workspace(ctx, Shape{logits.shape().rows()});
  ops::cross_entropy_shard_argmax(ctx, logits, range(), mx, neg_index);
  tp_all_reduce(neg_index, comm::ReduceOp::kMax, ctx, tp_size_, tp_rank_, kWho);  // the first arg-max of the row
  return eval_counts(ctx, loss, neg_index, targets);
}

}  // namespace cleave::layers
