// Softmax cross-entropy loss layer over the op seam (fused forward and backward; statistics in f32).
#include "layers/softmax_cross_entropy.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

Tensor SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& targets, Stash& stash, Context& ctx) {
  check_input(ctx, logits, DType::kF32, -1, 1, "softmax_cross_entropy");
  const std::int64_t rows = logits.shape().rows();
  CLEAVE_CHECK(targets.defined(), "softmax_cross_entropy: no targets for logits {}", logits.shape().str());
  CLEAVE_CHECK(targets.dtype() == DType::kI32 && targets.numel() == rows,
               "softmax_cross_entropy: expected {} i32 targets for logits {}, got {} {}", rows, logits.shape().str(),
               targets.shape().str(), dtype_name(targets.dtype()));
  Tensor lse = new_activation(ctx, Shape{rows}, DType::kF32);
  Tensor loss = new_activation(ctx, Shape{}, DType::kF32);
  ops::cross_entropy_forward(ctx, logits, targets, lse, loss);
  stash.tensors = {logits, targets, lse};
  return loss;
}

Tensor SoftmaxCrossEntropy::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor logits = stash_at(stash, 0, "softmax_cross_entropy");
  const Tensor targets = stash_at(stash, 1, "softmax_cross_entropy");
  const Tensor lse = stash_at(stash, 2, "softmax_cross_entropy");
  CLEAVE_CHECK(dy.defined() && dy.numel() == 1 && dy.dtype() == DType::kF32,
               "softmax_cross_entropy: dy must be one f32 element (the loss scale)");
  const std::int64_t classes = logits.shape().last();
  Tensor dlogits = new_activation(ctx, logits.shape());
  ops::cross_entropy_backward(ctx, logits, targets, lse, dy, dlogits, {0, classes, classes});
  stash.clear();
  return dlogits;
}

EvalCounts SoftmaxCrossEntropy::evaluate(const Tensor& logits, const Tensor& targets, Context& ctx) {
  Stash scratch;
  const Tensor loss = forward(logits, targets, scratch, ctx);
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  const ops::VocabRange all{0, classes, classes};
  Tensor row_max = new_workspace(ctx, Shape{rows});
  Tensor neg_index = new_workspace(ctx, Shape{rows});
  ops::cross_entropy_shard_max(ctx, logits, all, row_max);
  ops::cross_entropy_shard_argmax(ctx, logits, all, row_max, neg_index);
  return eval_counts(ctx, loss, neg_index, targets);
}

}  // namespace cleave::layers
