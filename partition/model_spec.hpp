// ModelSpec: the model as the partitioner sees it — pure data, no devices, no layers.
//
// A model is an ordered list of blocks; each block names its kind, its sizes and the per-sample shape of
// the tensor crossing its input and output boundary (the batch dimension is left out). A pipeline stage
// is a contiguous range of blocks. The cost model (cost_model.hpp) and the layer builders
// (layers/models/) both read this and nothing else, so a plan can be made without building a model.
//
// Each family's block order is in its header (partition/families/<family>.hpp); the family table
// (partition/families/family.hpp) says which family builds which list.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/core/enum_names.hpp"
#include "engine/core/shape.hpp"
#include "partition/families/family.hpp"

namespace cleave::partition {


struct BlockSpec {
  BlockKind kind = BlockKind::kLinear;
  std::string name;  // parameter-name prefix: "embed", "blocks.3", "final_norm", "head", "layers.0", "loss"
  Shape input;       // per-sample boundary shapes (no batch dimension)
  Shape output;
  DType input_dtype = DType::kF32;  // i32 for token ids into the embedding
  // Kind-specific sizes (0 where unused).
  std::int64_t in_features = 0;   // Linear in; LmHead / TransformerBlock / LayerNorm d_model; Conv in channels
  std::int64_t out_features = 0;  // Linear out; LmHead vocab; Conv out channels; Embedding d_model
  std::int64_t vocab_size = 0;    // Embedding, LmHead, loss over tokens
  std::int64_t seq_len = 0;       // Embedding (learned positions; 0 = none), TransformerBlock, LlamaBlock
  std::int64_t n_heads = 0;       // TransformerBlock
  std::int64_t d_ff = 0;          // TransformerBlock, LlamaBlock (ffn_hidden_size), MoeBlock (each expert's)
  std::int64_t n_kv_heads = 0;    // LlamaBlock, MoeBlock (key/value heads; divides n_heads)
  double rope_theta = 0;          // LlamaBlock, MoeBlock
  double norm_eps = 0;            // LlamaBlock, RmsNorm
  std::int64_t n_experts = 0;         // MoeBlock: routed experts (each a SwiGLU of width d_ff)
  std::int64_t top_k = 0;             // MoeBlock: experts per token
  std::int64_t n_shared_experts = 0;  // MoeBlock: always-on experts (one SwiGLU of n_shared_experts · d_ff)
  bool router_bias = false;           // MoeBlock: the router holds a per-expert selection bias [n_experts]
  bool aux_loss = false;              // MoeBlock: the load-balancing loss is on (model.aux_loss_coef > 0)
  bool shared_expert_gate = false;    // MoeBlock: the shared experts' output times sigmoid(x · w), w [1, D]
  std::int64_t attention_window = 0;  // LlamaBlock: a query sees the last `window` keys (itself included); 0 = all
  bool qkv_bias = false;          // LlamaBlock: q, k and v projections carry biases (Qwen2)
  bool qk_norm = false;           // LlamaBlock, MoeBlock: per-head RMSNorm of q and k before rope (Qwen3)
  std::int64_t kernel = 0;        // Conv2d kernel, MaxPool window
  bool tied = false;              // LmHead shares the Embedding's token table
};

// The family's config is the FamilyConfigs member `type` names (llama: resolved by llama_defaults).
struct ModelSpec : FamilyConfigs {
  ModelType type = ModelType::kGpt;
  std::vector<BlockSpec> blocks;
  // Logical names of parameters that two blocks share (a tied LM head reads the embedding's token table,
  // "embed.token"). Layouts that split such a parameter's users over pp ranks keep two copies and sum their
  // gradients; norms count it once. Empty when nothing is tied.
  std::vector<std::string> tied_parameters;
  // Unit of throughput figures: "tok" when a sample is a token sequence, "samples" otherwise.
  std::string_view throughput_unit() const { return is_language_model(type) ? "tok" : "samples"; }

  Shape sample_input() const { return blocks.front().input; }  // per-sample input shape
  DType input_dtype() const { return blocks.front().input_dtype; }
  // Tokens (gpt) or samples (mlp, cnn) that one sample of the batch contributes to throughput figures.
  std::int64_t items_per_sample() const { return is_language_model(type) ? token_sizes().seq_len : 1; }

  // The sizes gpt and llama share (llama: d_ff is ffn_hidden_size). Asserts a language model.
  using TokenSizes = partition::TokenSizes;
  TokenSizes token_sizes() const;
};

// The family's block list: family(type).make_spec (partition/families/family.hpp). Each builder checks its
// family's sizes and throws ConfigKeyError (engine/core/error.hpp) naming the model.* key and the numbers;
// config validation calls it, so a rule is written once. make_gpt_spec & co. are in the families' headers.
ModelSpec make_model_spec(ModelType type, const FamilyConfigs& configs);

}  // namespace cleave::partition
