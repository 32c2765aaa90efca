// The gpt family below the layers: GPT-2 style decoder (learned positions, pre-LayerNorm blocks with biases,
// GELU MLP, tied embeddings by default). Its config keys (model.* for model.type "gpt"), their checks, its
// block list, the tensor-parallel rules of its block, and the transformer block's costs (gpt_block.cpp).
// Layer builder: layers/families/gpt.cpp; config fields: engine/config/fields.hpp kGptFields; Hugging Face
// (GPT2LMHeadModel) names: engine/hf/hf_layout.cpp.
//
// Block order: embedding, transformer × n_layers, final layernorm, lm head, softmax cross-entropy.
#pragma once

#include <cstdint>

namespace cleave::partition {

struct ModelSpec;
struct Family;
struct BlockRules;

struct GptConfig {
  std::int64_t vocab_size = 256;
  std::int64_t d_model = 64;
  std::int64_t n_layers = 2;
  std::int64_t n_heads = 4;
  std::int64_t seq_len = 32;
  std::int64_t d_ff = 0;  // 0 = 4 * d_model
  bool tie_embeddings = true;
};

// Checks the sizes (ConfigKeyError naming model.<key> and the numbers) and builds the block list.
ModelSpec make_gpt_spec(const GptConfig& config);

// The family's rows in the tables of family.hpp.
Family gpt_family();
BlockRules transformer_block_rules();  // gpt_block.cpp

}  // namespace cleave::partition
