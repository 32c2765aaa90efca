// ParallelTransformerBlock (GPT-2, pre-LN, Megatron tensor parallelism):
//   x1 = x + attn(ln1(x)); y = x1 + mlp(ln2(x1))
// with ParallelCausalSelfAttention and ParallelMlp. x, x1, y and both LayerNorms are replicated on every
// tp rank; because the row-parallel outputs are all-reduced in forward and the column-parallel input
// gradients in backward, every replicated tensor (activations, dy of the LayerNorms, hence their
// gradients and the row-parallel biases' gradients) is the same on every tp rank: no extra all-reduce is
// needed to keep the replicated parameters in step. Four all-reduces per block per micro-batch, two in
// forward and two in backward_input; backward_weight communicates nothing.
//
// Parameter names, shapes of the logical tensors and initial values equal TransformerBlock's (residual
// projections start at std init.std / sqrt(2·n_layers)). Stash layout: as TransformerBlock.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/layernorm.hpp"
#include "layers/param_init.hpp"
#include "layers/parallel/parallel_attention.hpp"
#include "layers/parallel/parallel_mlp.hpp"

namespace cleave::layers {

class ParallelTransformerBlock final : public Layer {
 public:
  // n_heads and d_ff must be divisible by tp_size (tp_layout.hpp).
  ParallelTransformerBlock(std::string prefix, std::int64_t d_model, std::int64_t n_heads, std::int64_t d_ff,
                           std::int64_t n_layers, const ParamInit& init, int tp_size, int tp_rank);

  std::string_view kind() const override { return "parallel_transformer_block"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

 private:
  std::string prefix_;
  LayerNorm ln1_;
  ParallelCausalSelfAttention attn_;
  LayerNorm ln2_;
  ParallelMlp mlp_;
};

}  // namespace cleave::layers
