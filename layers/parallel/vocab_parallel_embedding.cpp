// Vocab-parallel token embedding: masked local lookup, tp all-reduce (or sequence reduce-scatter),
// replicated positions.
#include "layers/parallel/vocab_parallel_embedding.hpp"

#include <algorithm>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/context_parallel/positions.hpp"
#include "layers/embedding.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/shard.hpp"
#include "layers/parallel/sharded_param.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {

std::shared_ptr<Param> make_vocab_parallel_table(const std::string& name, std::int64_t vocab_size, std::int64_t dim,
                                                 float std, const ParamInit& init, int tp_size, int tp_rank) {
  check_tp_coordinates(tp_size, tp_rank, "vocab-parallel table " + name);
  CLEAVE_CHECK(vocab_size > 0 && dim > 0, "vocab-parallel table {}: vocab_size ({}) and dim ({}) must be > 0", name,
               vocab_size, dim);
  auto table = make_sharded_param(name, make_shard_spec(Shape{vocab_size, dim}, 0, tp_size, tp_rank), true,
                                  init.allocator);
  init_shard_normal(*table, init.seed, std);
  return table;
}

std::shared_ptr<Param> make_vocab_parallel_token_table(const std::string& prefix, std::int64_t vocab_size,
                                                       std::int64_t dim, const ParamInit& init, int tp_size,
                                                       int tp_rank) {
  return make_vocab_parallel_table(prefix + ".token", vocab_size, dim, 0.02f, init, tp_size, tp_rank);
}

VocabParallelEmbedding::VocabParallelEmbedding(std::string prefix, std::int64_t vocab_size, std::int64_t seq_len,
                                               std::int64_t dim, const ParamInit& init, int tp_size, int tp_rank)
    : prefix_(std::move(prefix)), vocab_(vocab_size), seq_len_(seq_len), dim_(dim), tp_size_(tp_size),
      tp_rank_(tp_rank) {
  check_embedding_sizes(vocab_size, seq_len, dim, who());
  token_ = make_vocab_parallel_token_table(prefix_, vocab_size, dim, init, tp_size, tp_rank);
  position_ = make_position_table(prefix_, seq_len, dim, init);
  const std::int64_t rows = shard_rows(token_->shard);
  first_ = rows * tp_rank;
  valid_ = std::clamp<std::int64_t>(vocab_size - first_, 0, rows);
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids, Stash& stash, Context& ctx) {
  check_token_ids(ctx, ids, seq_len_, who());
  const std::int64_t b = ids.dim(0), t = ids.dim(1);
  tp_group(ctx, tp_size_, tp_rank_, who());
  Tensor y = new_activation(ctx, Shape{b, t, dim_});
  ops::embedding_forward(ctx, ids, token_->compute(), y, {first_, valid_, vocab_});  // zeros outside this shard
  stash.tensors = {ids};
  if (sequence_parallel(ctx, tp_size_)) {
    // Each element has one non-zero contribution: the reduce-scatter is exact, like the all-reduce.
    y = sequence_reduce_scatter(y, ctx, tp_size_, tp_rank_, who());
    const std::int64_t first = y.dim(1) * tp_rank_;
    if (position_) add_positions(ctx, y, position_->compute(), t, first);
    return y;
  }
  tp_all_reduce(y, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, who());
  if (position_) add_positions(ctx, y, position_->compute(), t, 0);
  return y;
}

Tensor VocabParallelEmbedding::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor& ids = stash_at(stash, 0, who());
  check_input(ctx, dy, DType::kF32, dim_, 1, who(), "dy");
  if (sequence_parallel(ctx, tp_size_)) {
    CLEAVE_ASSERT(dy.numel() * tp_size_ == ids.numel() * dim_, "{}: dy {} is not a sequence shard of ids {}", who(),
                  dy.shape().str(), ids.shape().str());
    const Tensor shard = dy.view(Shape{ids.dim(0), ids.dim(1) / tp_size_, dim_});
    stash.tensors.push_back(sequence_all_gather(shard, ctx, tp_size_, tp_rank_, who()));
    stash.tensors.push_back(shard);
    return Tensor{};
  }
  CLEAVE_ASSERT(dy.numel() == ids.numel() * dim_, "{}: dy {} vs ids {}", who(), dy.shape().str(), ids.shape().str());
  stash.tensors.push_back(dy);
  return Tensor{};
}

void VocabParallelEmbedding::backward_weight(Stash& stash, Context& ctx) {
  const Tensor& ids = stash_at(stash, 0, who());
  const Tensor& dy = stash_at(stash, 1, who());
  // Token order, like the whole-table embedding: the local rows get bit-identical sums.
  ops::embedding_backward(ctx, ids, dy, token_->grad, {first_, valid_, vocab_});
  if (!position_) {
    // no position table (llama: rotary embeddings in the attention)
  } else if (stash.tensors.size() > 2) {
    // Sequence parallel: this rank's positions from its own tokens only, a partial gradient summed over tp
    // once per step (tp_util.hpp) like every replicated parameter's.
    const Tensor& shard = stash.tensors[2];
    const std::int64_t first = shard.dim(1) * tp_rank_;
    add_position_grads(ctx, shard, position_->grad, ids.dim(1), first);
  } else {
    add_position_grads(ctx, dy.view(Shape{ids.dim(0), ids.dim(1), dim_}), position_->grad, ids.dim(1), 0);
  }
  stash.clear();
}

}  // namespace cleave::layers
