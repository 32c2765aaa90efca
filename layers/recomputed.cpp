// See recomputed.hpp.
#include "layers/recomputed.hpp"

#include "engine/core/error.hpp"

namespace cleave::layers {

RecomputedLayer::RecomputedLayer(LayerPtr inner) : inner_(std::move(inner)) {
  CLEAVE_ASSERT(inner_ != nullptr, "RecomputedLayer needs a layer");
}

Tensor RecomputedLayer::forward(const Tensor& x, Stash& stash, Context& ctx) {
  stash.clear();
  Stash dropped;
  dropped.backward_follows = false;  // the rerun in backward_input rebuilds the stash the backward reads
  Tensor y = inner_->forward(x, dropped, ctx);
  stash.tensors = {x};
  return y;  // `dropped` (the inner stash) is released here
}

Tensor RecomputedLayer::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.tensors.size() == 1 && stash.children.empty(), "{}: backward_input without forward",
                inner_->kind());
  const Tensor x = stash.tensors[0];
  stash.reset(1);
  inner_->forward(x, stash.children[0], ctx);  // rebuilds the inner stash; the output is not needed
  return inner_->backward_input(dy, stash.children[0], ctx);
}

void RecomputedLayer::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 1, "{}: backward_weight without backward_input", inner_->kind());
  inner_->backward_weight(stash.children[0], ctx);
  stash.clear();
}

}  // namespace cleave::layers
