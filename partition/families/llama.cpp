// The llama family's defaults, config checks, block list, tensor-parallel rules and table row (see llama.hpp).
//
// Invariants: as gpt.cpp's (shapes chain, sizes > 0, one ConfigKeyError per bad key naming the numbers; the
// only copy of the family's rules).
#include "partition/model_spec.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

std::int64_t llama_ffn_hidden_size(std::int64_t d_model) {
  const std::int64_t two_thirds = 2 * (4 * d_model) / 3;
  return (two_thirds + 63) / 64 * 64;
}

LlamaConfig llama_defaults(LlamaConfig config) {
  if (config.n_kv_heads == 0) config.n_kv_heads = config.n_heads;
  if (config.ffn_hidden_size == 0) config.ffn_hidden_size = llama_ffn_hidden_size(config.d_model);
  if (config.max_seq_len == 0) config.max_seq_len = config.seq_len;
  return config;
}

namespace {

// The keys as given (before llama_defaults fills the absent ones): sizes positive, the optional ones >= 0, the
// window's first layer one of the blocks and only with a window.
void check_given_keys(const LlamaConfig& given) {
  check_positive(given.vocab_size, "vocab_size");
  check_positive(given.d_model, "d_model");
  check_positive(given.n_layers, "n_layers");
  check_positive(given.n_heads, "n_heads");
  check_positive(given.seq_len, "seq_len");
  CLEAVE_CHECK_KEY(given.n_kv_heads >= 0, "model.n_kv_heads", "must be > 0 (absent means model.n_heads), got {}",
                   given.n_kv_heads);
  CLEAVE_CHECK_KEY(given.ffn_hidden_size >= 0, "model.ffn_hidden_size",
                   "must be > 0 (absent means Llama's rule from d_model), got {}", given.ffn_hidden_size);
  CLEAVE_CHECK_KEY(given.max_seq_len >= 0, "model.max_seq_len", "must be > 0 (absent means model.seq_len), got {}",
                   given.max_seq_len);
  CLEAVE_CHECK_KEY(given.sliding_window >= 0, "model.sliding_window", "must be >= 0 (0: no window), got {}",
                   given.sliding_window);
  CLEAVE_CHECK_KEY(given.sliding_window_from_layer >= 0 && given.sliding_window_from_layer < given.n_layers,
                   "model.sliding_window_from_layer",
                   "is {}; the first block with the window must be one of the {} blocks (0 .. {}; 0: every block)",
                   given.sliding_window_from_layer, given.n_layers, given.n_layers - 1);
  CLEAVE_CHECK_KEY(given.sliding_window_from_layer == 0 || given.sliding_window > 0, "model.sliding_window_from_layer",
                   "is {} but model.sliding_window is 0 (no window to apply); set model.sliding_window or remove it",
                   given.sliding_window_from_layer);
}

// The keys with defaults filled in: seq_len within max_seq_len, an even head size, whole key/value groups,
// positive RoPE theta and norm epsilon.
void check_resolved_keys(const LlamaConfig& config) {
  CLEAVE_CHECK_KEY(config.seq_len <= config.max_seq_len, "model.seq_len",
                   "{} is above model.max_seq_len {} (the longest sequence this model's positions were made for; a "
                   "Hugging Face model's max_position_embeddings); set model.seq_len to at most {}",
                   config.seq_len, config.max_seq_len, config.max_seq_len);
  check_heads_divide_d_model(config.d_model, config.n_heads);
  CLEAVE_CHECK_KEY((config.d_model / config.n_heads) % 2 == 0, "model.d_model",
                   "{} / model.n_heads {} gives head size {}, which must be even: rotary embeddings rotate pairs of "
                   "columns; change d_model or n_heads",
                   config.d_model, config.n_heads, config.d_model / config.n_heads);
  CLEAVE_CHECK_KEY(config.n_heads % config.n_kv_heads == 0, "model.n_kv_heads",
                   "{} does not divide model.n_heads {}: each key/value head serves a whole group of query heads; "
                   "use a divisor of n_heads",
                   config.n_kv_heads, config.n_heads);
  CLEAVE_CHECK_KEY(config.rope_theta > 0.0, "model.rope_theta", "must be > 0, got {}", config.rope_theta);
  CLEAVE_CHECK_KEY(config.norm_eps > 0.0, "model.norm_eps", "must be > 0, got {}", config.norm_eps);
}

}  // namespace

ModelSpec make_llama_spec(const LlamaConfig& given) {
  check_given_keys(given);
  const LlamaConfig config = llama_defaults(given);
  check_resolved_keys(config);

  ModelSpec spec;
  spec.type = ModelType::kLlama;
  spec.llama = config;
  const std::int64_t t = config.seq_len, d = config.d_model, v = config.vocab_size;

  spec.blocks.push_back(token_embedding_block(t, d, v, 0));  // no learned positions: rotary inside the attention

  for (std::int64_t i = 0; i < config.n_layers; ++i) {
    BlockSpec block =
        make_block(BlockKind::kLlamaBlock, fmt::format("blocks.{}", i), Shape{t, d}, Shape{t, d}, d, d);
    block.seq_len = t;
    block.n_heads = config.n_heads;
    block.n_kv_heads = config.n_kv_heads;
    block.d_ff = config.ffn_hidden_size;
    block.rope_theta = config.rope_theta;
    block.norm_eps = config.norm_eps;
    block.attention_window = i >= config.sliding_window_from_layer ? config.sliding_window : 0;
    block.qkv_bias = config.qkv_bias;
    block.qk_norm = config.qk_norm;
    spec.blocks.push_back(block);
  }

  BlockSpec norm = make_block(BlockKind::kRmsNorm, "final_norm", Shape{t, d}, Shape{t, d}, d, d);
  norm.norm_eps = config.norm_eps;
  spec.blocks.push_back(norm);

  append_lm_head_and_loss(spec, t, d, v, config.tie_embeddings);
  return spec;
}

TokenSizes llama_token_sizes(const LlamaConfig& l) {
  return {l.vocab_size, l.d_model, l.n_layers, l.n_heads, l.seq_len, l.ffn_hidden_size, l.tie_embeddings};
}

// Every tp rank holds whole query heads, whole key/value heads and an equal share of the SwiGLU width.
void check_llama_tensor_parallel(const LlamaConfig& m, int tp_size, const char* ffn_share) {
  constexpr const char* kTpKey = "parallel.tensor_model_parallel_size";
  const std::int64_t g = std::gcd(std::gcd(m.n_heads, m.n_kv_heads), m.ffn_hidden_size);
  const std::string allowed = fmt::format("{{{}}}", fmt::join(allowed_tp_sizes(g, g), ", "));
  const auto rule = [&](std::int64_t value, const char* key, const char* what) {
    CLEAVE_CHECK_KEY(value % tp_size == 0, key,
                     "{} is not divisible by {} {}: each tp rank needs {}; use tp in {} (divisors of n_heads, "
                     "n_kv_heads and ffn_hidden_size)",
                     value, kTpKey, tp_size, what, allowed);
  };
  rule(m.n_heads, "model.n_heads", "whole query heads");
  rule(m.n_kv_heads, "model.n_kv_heads", "whole key/value heads");
  rule(m.ffn_hidden_size, "model.ffn_hidden_size", ffn_share);
}

std::vector<std::int64_t> llama_tp_sizes(const LlamaConfig& l) {
  return allowed_tp_sizes(std::gcd(l.n_heads, l.n_kv_heads), l.ffn_hidden_size);
}

namespace {

void llama_resolve(FamilyConfigs& c) { c.llama = llama_defaults(c.llama); }

ModelSpec llama_spec_of(const FamilyConfigs& c) { return make_llama_spec(c.llama); }
TokenSizes llama_token_sizes_of(const FamilyConfigs& c) { return llama_token_sizes(c.llama); }
void llama_check_tensor_parallel_of(const FamilyConfigs& c, int tp_size) {
  check_llama_tensor_parallel(c.llama, tp_size, "an equal share of the SwiGLU columns");
}
std::vector<std::int64_t> llama_tp_sizes_of(const FamilyConfigs& c) { return llama_tp_sizes(c.llama); }

}  // namespace

Family llama_family() {
  Family f;
  f.type = ModelType::kLlama;
  f.name = "llama";
  f.language_model = true;
  f.make_spec = llama_spec_of;
  f.resolve = llama_resolve;
  f.token_sizes = llama_token_sizes_of;
  f.check_tensor_parallel = llama_check_tensor_parallel_of;
  f.tp_sizes = llama_tp_sizes_of;
  f.sequence_parallel = true;
  f.blocks_are = spec_util::kLanguageModelBlocks;
  f.deeper_by = "model.n_layers";
  return f;
}

}  // namespace cleave::partition
