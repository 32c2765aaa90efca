// RowParallelLinear (Megatron): y [..., out] = all_reduce_sum(x_local [..., in/tp] · W_localᵀ) + b, the
// logical weight [out, in] split by INPUT features (columns) across the tp group.
//
// The input is this rank's slice of the input features (a column-parallel layer's output); the output is
// replicated. The forward all-reduce is Megatron's "g" operator (all-reduce forward, identity backward):
// backward_input is local, dx_local = dy · W_local. The bias is replicated and added once, after the
// reduce; since dy is replicated its gradient Σ dy is the same on every tp rank.
//
// Params: "<prefix>.weight" with ShardSpec{dim 1, parts tp, index tp_rank, logical [out, in]};
// "<prefix>.bias" [out] replicated (dim -1). Values equal Linear(prefix, in, out, bias, init)'s (the init
// bound uses the logical fan-in). Stash after forward: {x_local}; after backward_input: {x_local, dy};
// backward_weight accumulates dW_local += dyᵀ·x_local and db += Σ dy, then clears.
//
// Sequence parallelism (Context::sequence_parallel, tp > 1): the partial output [B, T, out] is
// reduce-scattered along the sequence instead of all-reduced (layers/parallel/tp_util.hpp), so the output is
// this rank's sequence shard [B, T/tp, out] and the bias is added to the shard. backward_input takes the
// shard dy [B, T/tp, out] and all-gathers it to [B, T, out] for dx and dW. The bias gradient sums only this
// rank's tokens (a partial gradient, summed over the tp group once per step like every replicated
// parameter's; sum_replicated_grads_over_tp). Stash after backward_input: {x_local, dy full, dy shard}, the
// shard only with a bias (its gradient is all that reads it: a bias-free projection, llama's o and down, keeps
// T/tp · out elements less per sample from I to W).
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/linear.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class RowParallelLinear final : public Layer {
 public:
  // in_features must be divisible by tp_size.
  RowParallelLinear(std::string prefix, std::int64_t in_features, std::int64_t out_features, bool bias,
                    const ParamInit& init, int tp_size, int tp_rank);

  std::string_view kind() const override { return "row_parallel_linear"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

  std::int64_t out_features() const { return local_.out_features(); }

 private:
  std::string who() const { return "row_parallel_linear " + prefix_; }

  std::string prefix_;
  int tp_size_, tp_rank_;
  Linear local_;                // the shard's GEMMs, without the bias
  std::shared_ptr<Param> bias_;  // replicated, added after the all-reduce
};

}  // namespace cleave::layers
