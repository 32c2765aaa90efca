// Token + position embedding layer over the op seam.
#include "layers/embedding.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/context_parallel/positions.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

std::shared_ptr<Param> make_token_table(const std::string& prefix, std::int64_t vocab_size, std::int64_t dim,
                                        const ParamInit& init) {
  auto token = make_param(prefix + ".token", Shape{vocab_size, dim}, true, init.allocator);
  init_normal(*token, init.seed, 0.02f);
  return token;
}

void check_embedding_sizes(std::int64_t vocab_size, std::int64_t seq_len, std::int64_t dim, const std::string& who) {
  CLEAVE_CHECK(vocab_size > 0 && seq_len >= 0 && dim > 0,
               "{}: vocab_size ({}) and dim ({}) must be > 0, seq_len ({}) >= 0 (0: no position table)", who,
               vocab_size, dim, seq_len);
}

std::shared_ptr<Param> make_position_table(const std::string& prefix, std::int64_t seq_len, std::int64_t dim,
                                           const ParamInit& init) {
  if (seq_len == 0) return nullptr;
  auto position = make_param(prefix + ".position", Shape{seq_len, dim}, false, init.allocator);
  init_normal(*position, init.seed, 0.02f);
  return position;
}

void check_token_ids(const Context& ctx, const Tensor& ids, std::int64_t seq_len, const std::string& who) {
  check_input(ctx, ids, DType::kI32, -1, 2, who);
  CLEAVE_CHECK(ids.rank() == 2, "{}: expected token ids [batch, seq], got {}", who, ids.shape().str());
  CLEAVE_CHECK(seq_len == 0 || ids.dim(1) <= seq_len,
               "{}: sequence of {} tokens exceeds the {} learned positions (model.seq_len)", who, ids.dim(1), seq_len);
}

Embedding::Embedding(std::string prefix, std::int64_t vocab_size, std::int64_t seq_len, std::int64_t dim,
                     const ParamInit& init)
    : prefix_(std::move(prefix)), vocab_(vocab_size), seq_len_(seq_len), dim_(dim) {
  check_embedding_sizes(vocab_size, seq_len, dim, "embedding " + prefix_);
  token_ = make_token_table(prefix_, vocab_size, dim, init);
  position_ = make_position_table(prefix_, seq_len, dim, init);
}

Tensor Embedding::forward(const Tensor& ids, Stash& stash, Context& ctx) {
  check_token_ids(ctx, ids, seq_len_, who_);
  const std::int64_t b = ids.dim(0), t = ids.dim(1);
  Tensor y = new_activation(ctx, Shape{b, t, dim_});
  ops::embedding_forward(ctx, ids, token_->compute(), y, {0, vocab_, vocab_});
  if (position_) add_positions(ctx, y, position_->compute(), t, 0);
  stash.tensors = {ids};
  return y;
}

Tensor Embedding::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  (void)ctx;
  const Tensor& ids = stash_at(stash, 0, who_);
  check_input(ctx, dy, DType::kF32, dim_, 1, who_, "dy");
  CLEAVE_ASSERT(dy.numel() == ids.numel() * dim_, "embedding {}: dy {} vs ids {}", prefix_, dy.shape().str(),
                ids.shape().str());
  stash.tensors.push_back(dy);
  return Tensor{};
}

void Embedding::backward_weight(Stash& stash, Context& ctx) {
  const Tensor& ids = stash_at(stash, 0, who_);
  const Tensor& dy = stash_at(stash, 1, who_);
  ops::embedding_backward(ctx, ids, dy, token_->grad, {0, vocab_, vocab_});
  if (position_) add_position_grads(ctx, dy.view(Shape{ids.dim(0), ids.dim(1), dim_}), position_->grad, ids.dim(1), 0);
  stash.clear();
}

}  // namespace cleave::layers
