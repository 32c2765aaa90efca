// Mlp (the transformer feed-forward): fc ("<prefix>.fc", D -> F) -> GELU ("<prefix>.gelu") -> proj
// ("<prefix>.proj", F -> D).
//
// One implementation serves every layout; only the two projections differ:
//  - one rank: fc and proj are Linears (the first constructor builds them);
//  - tensor parallel (make_parallel_mlp, layers/parallel/parallel_transformer_block.hpp): fc is a
//    ColumnParallelLinear, proj a RowParallelLinear, and the GELU runs on the local F / tp columns.
// The fc part maps [..., D] to [..., F_local]; the proj part maps [..., F_local] to [..., D].
//
// Stash layout: children {fc, gelu, proj}; no tensors of its own.
#pragma once

#include <memory>
#include <string>

#include "layers/activation.hpp"
#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class Mlp final : public Layer {
 public:
  // One rank. `init` for fc; `proj_init` for proj (GPT-2 scales its std by 1/sqrt(2·n_layers)).
  Mlp(std::string prefix, std::int64_t d_model, std::int64_t d_ff, const ParamInit& init,
      const ParamInit& proj_init);
  // From parts (shapes above). `tensor_parallel` only names the layer: kind "parallel_mlp", messages
  // "parallel mlp <prefix>".
  Mlp(std::string prefix, LayerPtr fc, LayerPtr proj, bool tensor_parallel);

  std::string_view kind() const override { return tensor_parallel_ ? "parallel_mlp" : "mlp"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const;

  std::string prefix_;
  bool tensor_parallel_ = false;
  LayerPtr fc_;
  Gelu gelu_;
  LayerPtr proj_;
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

}  // namespace cleave::layers
