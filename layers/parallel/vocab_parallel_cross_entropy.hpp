// VocabParallelCrossEntropy (Megatron): softmax cross-entropy over logits split by vocabulary across the tp
// group, without ever gathering the full logits.
//
// Input: this rank's logits [..., P] from VocabParallelLmHead (columns = vocabulary ids [r·P, r·P + P),
// P = ceil(V / tp); ids >= V are padding, treated as -inf: no probability mass, no gradient) and
// targets (i32 GLOBAL ids in [0, V) or -1 = ignored, one per row, the same on every tp rank).
// Forward: the row max is all-reduced (max), then the row sums of exp(x - max) and the target logits (each
// held by exactly one rank) are all-reduced (sum) in one call; lse = max + log(sum). Returns, on every tp
// rank, the scalar MEAN loss over the valid targets, like SoftmaxCrossEntropy (0 when none is valid).
// backward_input reads the one-element dy as the loss scale and returns the LOCAL dlogits
// dy · (softmax − onehot) / n_valid [..., P] (padding columns 0) with no communication.
// Stash after forward: {logits, targets, lse}; backward_input releases it (no weights).
#pragma once

#include <cstdint>

#include "kernels/ops/ops.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {

class VocabParallelCrossEntropy final : public LossLayer {
 public:
  VocabParallelCrossEntropy(std::int64_t vocab_size, int tp_size, int tp_rank);

  std::string_view kind() const override { return "vocab_parallel_cross_entropy"; }
  using LossLayer::forward;
  Tensor forward(const Tensor& logits, const Tensor& targets, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  EvalCounts evaluate(const Tensor& logits, const Tensor& targets, Context& ctx) override;

  std::int64_t local_vocab() const { return local_; }

 private:
  ops::VocabRange range() const { return {first_, valid_, vocab_}; }
  // Checks logits and targets; returns the rows.
  std::int64_t check(const Tensor& logits, const Tensor& targets, const Context& ctx) const;
  // The all-reduced row max of the shards.
  Tensor row_max(const Tensor& logits, Context& ctx) const;

  std::int64_t vocab_;
  int tp_size_, tp_rank_;
  std::int64_t local_ = 0;  // P: logits columns per rank, padding included
  std::int64_t first_ = 0;  // vocabulary id of local column 0
  std::int64_t valid_ = 0;  // real columns on this rank
};

}  // namespace cleave::layers
