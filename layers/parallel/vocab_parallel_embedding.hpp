// VocabParallelEmbedding (Megatron): the token table's rows (the vocabulary) split across the tp group;
// learned positions replicated. ids i32 [B, T] (replicated, T <= seq_len) -> [B, T, dim] (replicated).
//
// Vocabulary layout: V is padded up to a multiple of tp; tp rank r holds rows [r·P, (r+1)·P) of the
// padded table, P = ceil(V / tp) (ShardSpec{dim 0, parts tp, index r, logical [V, dim]}; the logical
// tensor is the real [V, dim] table). Padding rows (ids >= V, only on the last ranks) are initialised to 0,
// never looked up (ids are checked against V) and so never get a gradient: they stay 0 under any
// optimizer. Forward: each rank copies the rows of the ids in its range and writes zeros elsewhere, the
// result is all-reduced (sum; exact, every element has one non-zero contribution), then the replicated
// positions are added, so the output equals Embedding's bit for bit. backward_input returns an undefined
// Tensor (ids have no gradient) and keeps dy; backward_weight scatter-adds dy into the local rows (ids in
// range, token order) and into the position table (same on every rank), with no communication.
//
// Params: "<prefix>.token" (sharded, weight-decayed) and "<prefix>.position" [seq_len, dim] (replicated,
// not decayed; none when seq_len is 0, as Embedding), both normal(0, 0.02) with Embedding's values.
// token_table() is the shard a tied VocabParallelLmHead shares. Stash: as Embedding ({ids}, then {ids, dy}).
//
// Sequence parallelism (Context::sequence_parallel, tp > 1): the looked-up [B, T, dim] is reduce-scattered
// along the sequence instead of all-reduced (still exact), and tp rank r adds the positions of its tokens
// [r·T/tp, (r+1)·T/tp): the output is the sequence shard [B, T/tp, dim]. backward_input all-gathers the shard
// dy to [B, T, dim] for the token rows (every rank's vocabulary rows see every token); the position table's
// gradient takes this rank's tokens only (a partial gradient, summed over tp once per step).
// Stash: {ids}, then {ids, dy full, dy shard}.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

class VocabParallelEmbedding final : public Layer {
 public:
  VocabParallelEmbedding(std::string prefix, std::int64_t vocab_size, std::int64_t seq_len, std::int64_t dim,
                         const ParamInit& init, int tp_size, int tp_rank);

  std::string_view kind() const override { return "vocab_parallel_embedding"; }
  Tensor forward(const Tensor& ids, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override {
    if (!position_) return {token_};
    return {token_, position_};
  }

  const std::shared_ptr<Param>& token_table() const { return token_; }
  const std::shared_ptr<Param>& position_table() const { return position_; }  // null when seq_len is 0

 private:
  std::string who() const { return "vocab_parallel_embedding " + prefix_; }

  std::string prefix_;
  std::int64_t vocab_, seq_len_, dim_;
  int tp_size_, tp_rank_;
  std::int64_t first_ = 0;  // first vocabulary id of this rank's rows
  std::int64_t valid_ = 0;  // real (non-padding) rows of this rank
  std::shared_ptr<Param> token_;
  std::shared_ptr<Param> position_;
};

// Tp rank tp_rank's shard of a [vocab_size, dim] table named `name`, rows split with padding as above,
// real rows normal(0, std) with the values the unsharded table has there (seed from `init`), padding 0.
// make_vocab_parallel_token_table is the embedding's "<prefix>.token" (std 0.02): what a tied head on
// another pipeline stage creates for itself, like make_token_table.
std::shared_ptr<Param> make_vocab_parallel_table(const std::string& name, std::int64_t vocab_size, std::int64_t dim,
                                                 float std, const ParamInit& init, int tp_size, int tp_rank);
std::shared_ptr<Param> make_vocab_parallel_token_table(const std::string& prefix, std::int64_t vocab_size,
                                                       std::int64_t dim, const ParamInit& init, int tp_size,
                                                       int tp_rank);

}  // namespace cleave::layers
