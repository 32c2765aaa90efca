// SoftmaxCrossEntropy: logits [..., K] and targets (i32, one per logits row, -1 = ignored) -> a
// scalar tensor (shape [], one element) holding the MEAN loss over the valid targets of this micro-batch.
// With no valid target the loss is 0 and the gradient is zero.
//
// backward_input(dy) reads the one-element dy as the loss scale (the caller passes e.g.
// 1 / gradient_accumulation_steps) and returns dlogits = dy · (softmax − onehot) / n_valid, as a new
// tensor (the logits are not overwritten: the caller may still hold them). Stash after forward:
// {logits, targets, lse}; backward_input releases it (there are no weights).
#pragma once

#include "layers/layer.hpp"

namespace cleave::layers {

class SoftmaxCrossEntropy final : public LossLayer {
 public:
  SoftmaxCrossEntropy() = default;

  std::string_view kind() const override { return "softmax_cross_entropy"; }
  using LossLayer::forward;
  Tensor forward(const Tensor& logits, const Tensor& targets, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  EvalCounts evaluate(const Tensor& logits, const Tensor& targets, Context& ctx) override;
};

}  // namespace cleave::layers
