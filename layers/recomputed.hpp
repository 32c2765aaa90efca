// RecomputedLayer: full activation recomputation (train.recompute "full") around any layer, used for
// transformer blocks. forward() runs the inner layer and keeps only its input; backward_input() reruns the
// inner forward on that input to rebuild the inner stash (its output is discarded), then runs the inner
// backward_input; backward_weight() finishes with the rebuilt stash.
//
// Invariants: results are bit-identical to the inner layer's own (the rerun is the same ops on the same
// input in the same context, including a tensor-parallel block's all-reduces, which every tp rank reruns in
// the same order); between forward and backward_input a micro-batch holds only the input tensor. The first
// forward's stash says no backward follows (Stash::backward_follows), so what only a backward reads is made once,
// by the rerun: the moe block's count exchange under context parallelism is posted once per micro-batch.
// Stash layout: after forward tensors {x}; after backward_input children {inner stash}.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/layer.hpp"

namespace cleave::layers {

class RecomputedLayer final : public Layer {
 public:
  explicit RecomputedLayer(LayerPtr inner);

  std::string_view kind() const override { return inner_->kind(); }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override { return inner_->params(); }

  Layer& inner() { return *inner_; }

 private:
  LayerPtr inner_;
};

}  // namespace cleave::layers
