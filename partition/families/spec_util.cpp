// Helpers of the families' spec builders (see spec_util.hpp).
#include "partition/families/spec_util.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::partition::spec_util {

void check_positive(std::int64_t value, std::string_view key) {
  CLEAVE_CHECK_KEY(value > 0, fmt::format("model.{}", key), "must be > 0, got {}", value);
}

void check_heads_divide_d_model(std::int64_t d_model, std::int64_t n_heads) {
  CLEAVE_CHECK_KEY(d_model % n_heads == 0, "model.d_model",
                   "{} is not divisible by model.n_heads {} (head size would be {:.3g}): each head gets d_model / "
                   "n_heads columns",
                   d_model, n_heads, static_cast<double>(d_model) / static_cast<double>(n_heads));
}

BlockSpec make_block(BlockKind kind, std::string name, const Shape& input, const Shape& output,
                     std::int64_t in_features, std::int64_t out_features) {
  BlockSpec block;
  block.kind = kind;
  block.name = std::move(name);
  block.input = input;
  block.output = output;
  block.in_features = in_features;
  block.out_features = out_features;
  return block;
}

BlockSpec make_loss_block(const Shape& logits, std::int64_t classes) {
  return make_block(BlockKind::kSoftmaxCrossEntropy, "loss", logits, Shape{}, classes);
}

BlockSpec token_embedding_block(std::int64_t t, std::int64_t d, std::int64_t v, std::int64_t positions) {
  BlockSpec embed = make_block(BlockKind::kEmbedding, "embed", Shape{t}, Shape{t, d}, 0, d);
  embed.input_dtype = DType::kI32;
  embed.vocab_size = v;
  embed.seq_len = positions;
  return embed;
}

void append_lm_head_and_loss(ModelSpec& spec, std::int64_t t, std::int64_t d, std::int64_t v, bool tied) {
  BlockSpec head = make_block(BlockKind::kLmHead, "head", Shape{t, d}, Shape{t, v}, d, v);
  head.vocab_size = v;
  head.tied = tied;
  spec.blocks.push_back(head);

  BlockSpec loss = make_loss_block(Shape{t, v}, v);
  loss.vocab_size = v;
  spec.blocks.push_back(loss);
  if (tied) spec.tied_parameters = {spec.blocks.front().name + ".token"};
}

}  // namespace cleave::partition::spec_util
