// Mlp (the transformer feed-forward): fc Linear ("<prefix>.fc", D -> F) -> GELU -> proj Linear
// ("<prefix>.proj", F -> D).
//
// Stash layout: children {fc, gelu, proj}; no tensors of its own.
#pragma once

#include <memory>
#include <string>

#include "layers/gelu.hpp"
#include "layers/layer.hpp"
#include "layers/linear.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class Mlp final : public Layer {
 public:
  Mlp(std::string prefix, std::int64_t d_model, std::int64_t d_ff, const ParamInit& init,
      const ParamInit& proj_init);

  std::string_view kind() const override { return "mlp"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  std::string prefix_;
  Linear fc_;
  Gelu gelu_;
  Linear proj_;
};

}  // namespace cleave::layers
