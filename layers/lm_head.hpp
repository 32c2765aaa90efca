// LmHead: logits [..., V] = x [..., D] · Wᵀ with W [V, D] and no bias.
//
// Untied: W is "<prefix>.weight", normal(0, 0.02). Tied: W is the token table Param "embed.token". When
// the embedding is built in the same layer list the head holds the SAME Param (shared_ptr) and both
// layers accumulate into its one grad. When they are on different pipeline stages the head holds its own
// copy with the same name and initial values (make_token_table); keeping the copies equal is then the
// embedding group's job: all-reduce the two grads before the optimizer step (docs/architecture.md, Megatron's
// "embedding group").
//
// Stash: as Linear ({x}, then {x, dy}).
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/linear.hpp"

namespace cleave::layers {

class LmHead final : public Layer {
 public:
  // Uses `weight` ([vocab, d_model]) as the projection: an untied head's own weight or the token table.
  LmHead(std::string prefix, std::shared_ptr<Param> weight, bool tied);

  std::string_view kind() const override { return "lm_head"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override { return linear_.forward(x, stash, ctx); }
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override {
    return linear_.backward_input(dy, stash, ctx);
  }
  void backward_weight(Stash& stash, Context& ctx) override { linear_.backward_weight(stash, ctx); }
  std::vector<std::shared_ptr<Param>> params() const override { return linear_.params(); }

  bool tied() const { return tied_; }
  const std::shared_ptr<Param>& weight() const { return linear_.weight(); }

 private:
  Linear linear_;
  bool tied_;
};

}  // namespace cleave::layers
