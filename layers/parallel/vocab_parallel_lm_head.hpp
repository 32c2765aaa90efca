// VocabParallelLmHead: logits for this tp rank's slice of the vocabulary, logits_local [..., P] =
// x [..., D] · W_localᵀ, no bias; W_local is rank r's rows of the [V, D] head (or tied token table),
// padded as the vocab-parallel embedding (P = ceil(V / tp); padding columns of the logits are 0 and
// VocabParallelCrossEntropy ignores them). A ColumnParallelLinear without bias: the input is replicated,
// backward_input all-reduces dx over the tp group, backward_weight accumulates into the local rows only.
//
// Untied: W is "<prefix>.weight", the shard of a normal(0, 0.02) [V, D] tensor (make_vocab_parallel_table).
// Tied: W is the embedding's token shard "embed.token" — the SAME Param when the vocab-parallel embedding
// is in the same layer list, otherwise a copy with the same name and values (make_vocab_parallel_token_table)
// whose gradient the embedding group (same tp rank on the first and last pipeline stage) must all-reduce
// before the optimizer step, exactly as for LmHead. Stash: as Linear. Under sequence parallelism the input is
// the final norm's sequence shard [B, T/tp, D], all-gathered by the ColumnParallelLinear (its mode), and the
// logits cover every token, so VocabParallelCrossEntropy is unchanged.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/parallel/column_parallel_linear.hpp"

namespace cleave::layers {

class VocabParallelLmHead final : public Layer {
 public:
  VocabParallelLmHead(std::string prefix, std::shared_ptr<Param> weight, bool tied, int tp_size, int tp_rank);

  std::string_view kind() const override { return "vocab_parallel_lm_head"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override { return linear_.forward(x, stash, ctx); }
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override {
    return linear_.backward_input(dy, stash, ctx);
  }
  void backward_weight(Stash& stash, Context& ctx) override { linear_.backward_weight(stash, ctx); }
  std::vector<std::shared_ptr<Param>> params() const override { return linear_.params(); }

  bool tied() const { return tied_; }
  const std::shared_ptr<Param>& weight() const { return linear_.weight(); }
  std::int64_t vocab_size() const { return linear_.weight()->shard.logical[0]; }
  std::int64_t local_vocab() const { return linear_.local_out_features(); }  // P, padding included

 private:
  ColumnParallelLinear linear_;
  bool tied_;
};

}  // namespace cleave::layers
