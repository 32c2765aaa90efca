// ColumnParallelLinear (Megatron): y_local [..., out/tp] = x [..., in] · W_localᵀ + b_local, the logical
// weight [out, in] split by OUTPUT features (rows) across the tp group.
//
// The input is replicated on every tp rank, the output is this rank's slice of the output features.
// backward_input computes the partial dx = dy_local · W_local and all-reduces it (sum) over the tp group
// (Megatron's "f" operator: identity forward, all-reduce backward), so dx is replicated. backward_weight
// needs no communication: dW_local += dy_localᵀ·x, db_local += Σ dy_local.
//
// Params: "<prefix>.weight" with ShardSpec{dim 0, parts tp, index tp_rank, groups, logical [out, in]} and
// "<prefix>.bias" {dim 0, ..., logical [out]}. `groups` > 1 splits each of `groups` equal row blocks
// separately (the fused QKV weight is 3 blocks q|k|v, each split by heads). Values equal the slice of the
// weights Linear(prefix, in, out, bias, init) makes. Stash: as Linear ({x}, then {x, dy}).
//
// Sequence parallelism (Context::sequence_parallel, tp > 1; Korthikanti et al. 2022): the input is this
// rank's sequence shard x [B, T/tp, in]. forward all-gathers it along the sequence (layers/parallel/
// tp_util.hpp) and runs the GEMM on the full [B, T, in]; backward_input reduce-scatters the partial dx
// [B, T, in] along the sequence instead of all-reducing it, returning the summed shard [B, T/tp, in].
// The stash keeps only the SHARD x (the activation memory of the input divides by tp); backward_weight
// all-gathers it again for dW (Megatron does the same), so backward_weight communicates in this mode.
// Stash: {x shard}, then {x shard, dy}. Parts that read one input (llama's q, k, v; gate, up) share the
// gather and the reduce-scatter through the *_gathered / backward_input_into steps (shared_input.hpp).
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/linear.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class ColumnParallelLinear final : public Layer {
 public:
  // Creates the shards. out_features must be divisible by groups * tp_size.
  ColumnParallelLinear(std::string prefix, std::int64_t in_features, std::int64_t out_features, bool bias,
                       const ParamInit& init, int tp_size, int tp_rank, int groups = 1);
  // Uses existing shards (a tied vocab-parallel head uses the embedding's token shard): weight
  // [out_local, in] split on dim 0 for (tp_size, tp_rank), bias [out_local] or null. Padding rows (see
  // ShardSpec) give output columns that are 0 when the weight's and bias's padding is 0.
  ColumnParallelLinear(std::string prefix, std::shared_ptr<Param> weight, std::shared_ptr<Param> bias, int tp_size,
                       int tp_rank);

  std::string_view kind() const override { return "column_parallel_linear"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override { return local_.params(); }

  // Steps for a caller that gathers the input once for several parts (shared_input.hpp), under sequence
  // parallelism: forward_gathered: y from `full` (the all-gather of the shard x), stash {x}. backward_input_into
  // (also without sequence parallelism, x then whole): this rank's partial dx [B, T, in] written to (or, with
  // `accumulate`, added to) dx_full, not reduced over tp, stash {x, dy}.
  // backward_weight_gathered: the weight gradient from `full`, the all-gather of the stashed x.
  Tensor forward_gathered(const Tensor& x, const Tensor& full, Stash& stash, Context& ctx);
  void backward_input_into(const Tensor& dy, const Tensor& dx_full, bool accumulate, Stash& stash, Context& ctx);
  void backward_weight_gathered(const Tensor& full, Stash& stash, Context& ctx);

  std::int64_t in_features() const { return local_.in_features(); }
  std::int64_t local_out_features() const { return local_.out_features(); }
  const std::shared_ptr<Param>& weight() const { return local_.weight(); }
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }

 private:
  std::string who() const { return "column_parallel_linear " + prefix_; }

  std::string prefix_;
  int tp_size_, tp_rank_;
  Linear local_;  // the shard's GEMMs
};

}  // namespace cleave::layers
