// SwigluMlp (Llama's feed-forward): gate ("<prefix>.gate", D -> F) and up ("<prefix>.up", D -> F) ->
// h = silu(gate) * up (ops::swiglu_forward) -> down ("<prefix>.down", F -> D). No biases.
//
// One implementation serves every layout; only the three projections differ: Linears on one rank;
// ColumnParallelLinear gate and up with RowParallelLinear down under tensor parallelism (make_swiglu_mlp),
// SwiGLU then running on the local F / tp columns. The gate and up parts map [..., D] to [..., F_local];
// the down part [..., F_local] to [..., D]. Under tensor parallelism gate and up share one reduction of their
// summed dx (an all-reduce; under sequence parallelism a reduce-scatter, and one all-gather of x)
// (layers/parallel/shared_input.hpp).
//
// Stash layout: tensors {gate output, up output}, children {gate, up, down}. backward_input releases the
// two tensors; the children keep what their weight gradients need.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"
#include "layers/parallel/shared_input.hpp"

namespace cleave::layers {

class SwigluMlp final : public Layer {
 public:
  SwigluMlp(std::string prefix, LayerPtr gate, LayerPtr up, LayerPtr down, bool tensor_parallel);

  std::string_view kind() const override { return tensor_parallel_ ? "parallel_swiglu_mlp" : "swiglu_mlp"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const { return (tensor_parallel_ ? "parallel swiglu mlp " : "swiglu mlp ") + prefix_; }

  std::string prefix_;
  bool tensor_parallel_ = false;
  LayerPtr gate_, up_, down_;
  SharedInputParts gate_up_{{gate_.get(), up_.get()}};  // one gather / one reduction of dx over tp
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

// A SwigluMlp named `prefix` (D -> F -> D) for any tp size: its gate, up and down projections ("<prefix>.gate" ...)
// made in that order (tp_projection.hpp: Linears on one rank, else this tp rank's shards).
std::unique_ptr<SwigluMlp> make_swiglu_mlp(const std::string& prefix, std::int64_t d, std::int64_t f,
                                           const ParamInit& init, int tp_size, int tp_rank);

}  // namespace cleave::layers
