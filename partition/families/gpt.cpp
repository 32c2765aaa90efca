// The gpt family's config checks, block list, tensor-parallel rules and table row (see gpt.hpp).
//
// Invariants: every block's input shape equals the previous block's output shape; every size is > 0; each
// bad size is refused with a ConfigKeyError ("model.<key>: ...") that names the numbers. These checks are
// the only copy of the family's rules: config validation runs them too (engine/config/validate.cpp).
#include "partition/model_spec.hpp"

#include <fmt/format.h>

#include <numeric>

#include "engine/core/error.hpp"
#include "partition/families/spec_util.hpp"
#include "partition/tp_rules.hpp"

namespace cleave::partition {

using spec_util::append_lm_head_and_loss;
using spec_util::check_heads_divide_d_model;
using spec_util::check_positive;
using spec_util::make_block;
using spec_util::token_embedding_block;

ModelSpec make_gpt_spec(const GptConfig& config) {
  check_positive(config.vocab_size, "vocab_size");
  check_positive(config.d_model, "d_model");
  check_positive(config.n_layers, "n_layers");
  check_positive(config.n_heads, "n_heads");
  check_positive(config.seq_len, "seq_len");
  CLEAVE_CHECK_KEY(config.d_ff >= 0, "model.d_ff", "must be >= 0 (0 means 4 * d_model), got {}", config.d_ff);
  check_heads_divide_d_model(config.d_model, config.n_heads);

  ModelSpec spec;
  spec.type = ModelType::kGpt;
  spec.gpt = config;
  if (spec.gpt.d_ff == 0) spec.gpt.d_ff = 4 * config.d_model;
  const std::int64_t t = config.seq_len, d = config.d_model, v = config.vocab_size;

  spec.blocks.push_back(token_embedding_block(t, d, v, t));  // learned positions

  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    BlockSpec block =
        make_block(BlockKind::kTransformerBlock, fmt::format("blocks.{}", i), Shape{t, d}, Shape{t, d}, d, d);
    block.seq_len = t;
    block.n_heads = config.n_heads;
    block.d_ff = spec.gpt.d_ff;
    spec.blocks.push_back(block);
  }

  spec.blocks.push_back(make_block(BlockKind::kLayerNorm, "final_norm", Shape{t, d}, Shape{t, d}, d, d));

  append_lm_head_and_loss(spec, t, d, v, config.tie_embeddings);
  return spec;
}

namespace {

ModelSpec gpt_spec(const FamilyConfigs& c) { return make_gpt_spec(c.gpt); }

void gpt_resolve(FamilyConfigs& c) {
  if (c.gpt.d_ff == 0) c.gpt.d_ff = 4 * c.gpt.d_model;
}

TokenSizes gpt_token_sizes(const FamilyConfigs& c) {
  const GptConfig& g = c.gpt;
  return {g.vocab_size, g.d_model, g.n_layers, g.n_heads, g.seq_len, g.d_ff, g.tie_embeddings};
}

// Every tp rank needs whole attention heads and an equal share of the MLP width.
void gpt_check_tensor_parallel(const FamilyConfigs& c, int tp) {
  check_tp_heads(c.gpt.n_heads, tp, c.gpt.d_ff);
  check_tp_d_ff(c.gpt.d_ff, tp, c.gpt.n_heads);
}

std::vector<std::int64_t> gpt_tp_sizes(const FamilyConfigs& c) {
  const GptConfig& g = c.gpt;
  return allowed_tp_sizes(g.n_heads, g.d_ff > 0 ? g.d_ff : 4 * g.d_model);
}

}  // namespace

Family gpt_family() {
  Family f;
  f.type = ModelType::kGpt;
  f.name = "gpt";
  f.language_model = true;
  f.make_spec = gpt_spec;
  f.resolve = gpt_resolve;
  f.token_sizes = gpt_token_sizes;
  f.check_tensor_parallel = gpt_check_tensor_parallel;
  f.tp_sizes = gpt_tp_sizes;
  f.sequence_parallel = true;
  f.blocks_are = spec_util::kLanguageModelBlocks;
  f.deeper_by = "model.n_layers";
  return f;
}

}  // namespace cleave::partition
