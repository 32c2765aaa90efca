// SharedExpertGate: Qwen2-MoE's gated shared expert, the shared experts' SwiGLU (any layout's SwigluMlp) with its
// output scaled per token by a learned sigmoid gate:
//   y[n, :] = sigmoid(x[n, :] · w) · shared(x)[n, :],   w = <prefix>.weight [1, D] (a 1-output linear, no bias).
// MoeMlp (moe_mlp.hpp) takes it as its shared child when model.shared_expert_gate is true (make_moe_block); built
// from ops the seam already has (gemm, moe_gather's row scale, moe_combine_weight_grad's row dot), so it runs on
// every device those run on. The sigmoid of the N gate logits is taken on the host (N floats, as the router does).
//
// Tensor parallelism: w is replicated (replicated_spec). The shared SwigluMlp returns whole rows (all-reduced;
// under sequence parallelism this rank's tokens, reduce-scattered), so every rank gates the rows it holds with the
// same numbers; the gate's share of the input gradient is added on every rank to the SwigluMlp's (whole rows
// there too), and w's gradient is each rank's full one (sequence parallelism: its own tokens', summed over tp
// by the trainer with the other replicated parameters). Invariant: every value equals the one-rank layer's.
//
// Stash layout: tensors {x, shared output [N, D], sigmoid [N] f32, identity index [N] i32}; backward_input
// replaces them by {x, dlogit [N, 1] (compute dtype)}; children {shared}.
// Its name and the host vectors of each call (the sigmoid, the identity index, the gate's gradient) are kept from
// call to call (refilled, never read across calls), so a steady-state step allocates none of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class SharedExpertGate final : public Layer {
 public:
  // prefix: the gate's name ("blocks.3.moe.shared_gate": parameter "<prefix>.weight"); d: the model width;
  // shared: the shared experts' SwigluMlp (not null), whose parameters come first in params().
  SharedExpertGate(std::string prefix, std::int64_t d, LayerPtr shared, const ParamInit& init);

  std::string_view kind() const override { return "shared_expert_gate"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  const std::string& who() const { return who_; }

  std::string prefix_;
  std::int64_t d_ = 0;
  LayerPtr shared_;
  std::shared_ptr<Param> weight_;
  // Host scratch refilled by each call: σ of the gate logits [N], the identity index 0..N-1, the gate's gradient [N].
  std::vector<float> sig_, dlogit_;
  std::vector<std::int32_t> identity_;
  std::string who_ = "shared expert gate " + prefix_;  // last: built once from prefix_
};

}  // namespace cleave::layers
