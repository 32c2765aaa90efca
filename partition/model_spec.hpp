// ModelSpec: the model as the partitioner sees it — pure data, no devices, no layers.
//
// A model is an ordered list of blocks; each block names its kind, its sizes and the per-sample shape of
// the tensor crossing its input and output boundary (the batch dimension is left out). A pipeline stage
// is a contiguous range of blocks. The cost model (cost_model.hpp) and the layer builders
// (layers/models/) both read this and nothing else, so a plan can be made without building a model.
//
// Block order for each model type:
//   gpt: embedding, transformer × n_layers, final layernorm, lm head, softmax cross-entropy
//   llama: embedding (token table only), llama block × n_layers, final rmsnorm, lm head, softmax cross-entropy
//   mlp: linear (+ activation) × len(hidden), linear to classes, softmax cross-entropy
//   cnn: (conv2d, relu, maxpool) × len(channels), flatten, linear to classes, softmax cross-entropy
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/core/enum_names.hpp"
#include "engine/core/shape.hpp"

namespace cleave::partition {

// model.type: which of the three model families (and which config struct below) is built.
enum class ModelType { kGpt, kMlp, kCnn, kLlama };
constexpr std::array<EnumName<ModelType>, 4> enum_names(ModelType) {
  return {{{ModelType::kGpt, "gpt"}, {ModelType::kMlp, "mlp"}, {ModelType::kCnn, "cnn"}, {ModelType::kLlama, "llama"}}};
}
// gpt and llama: token sequences in, next-token loss out (token data, generation, tok/s figures).
constexpr bool is_language_model(ModelType type) { return type == ModelType::kGpt || type == ModelType::kLlama; }

// model.activation (mlp).
enum class Activation { kRelu, kGelu };
constexpr std::array<EnumName<Activation>, 2> enum_names(Activation) {
  return {{{Activation::kRelu, "relu"}, {Activation::kGelu, "gelu"}}};
}

struct GptConfig {
  std::int64_t vocab_size = 256;
  std::int64_t d_model = 64;
  std::int64_t n_layers = 2;
  std::int64_t n_heads = 4;
  std::int64_t seq_len = 32;
  std::int64_t d_ff = 0;  // 0 = 4 * d_model
  bool tie_embeddings = true;
};

// Llama family (Llama 2/3, TinyLlama, SmolLM...): RMSNorm, rotary positions, grouped-query attention, SwiGLU,
// no biases. 0 in n_kv_heads / ffn_hidden_size means "not given" (resolved by llama_defaults).
struct LlamaConfig {
  std::int64_t vocab_size = 256;
  std::int64_t d_model = 64;
  std::int64_t n_layers = 2;
  std::int64_t n_heads = 4;
  std::int64_t n_kv_heads = 0;       // 0 = n_heads (plain multi-head attention)
  std::int64_t seq_len = 32;
  std::int64_t ffn_hidden_size = 0;  // 0 = llama_ffn_hidden_size(d_model)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
};

// Llama's MLP width rule: 2/3 of 4 · d_model (integer), rounded up to a multiple of 64.
std::int64_t llama_ffn_hidden_size(std::int64_t d_model);
// `config` with n_kv_heads and ffn_hidden_size resolved where they are 0.
LlamaConfig llama_defaults(LlamaConfig config);

struct MlpConfig {
  std::int64_t in_features = 64;
  std::vector<std::int64_t> hidden = {128, 128};
  std::int64_t num_classes = 10;
  Activation activation = Activation::kRelu;
};

struct CnnConfig {
  std::int64_t in_channels = 1;
  std::int64_t height = 8;
  std::int64_t width = 8;
  std::vector<std::int64_t> channels = {16, 32};
  std::int64_t kernel = 3;  // stride 1, "same" padding (kernel / 2)
  std::int64_t pool = 2;    // max-pool window and stride
  std::int64_t num_classes = 10;
};

enum class BlockKind {
  kEmbedding,         // token + learned position embedding: [T] i32 -> [T, D]
  kTransformerBlock,  // pre-LN: x + attn(ln1(x)); x + mlp(ln2(x))
  kLayerNorm,         // final norm
  kLmHead,            // [T, D] -> [T, V] (tied to the embedding when tie_embeddings)
  kLinear,            // [F_in] -> [F_out]
  kRelu,
  kGelu,
  kConv2d,   // [C, H, W] -> [C', H, W]
  kMaxPool,  // [C, H, W] -> [C, H / pool, W / pool]
  kFlatten,  // [C, H, W] -> [C * H * W]
  kSoftmaxCrossEntropy,  // logits [.., K] + integer targets -> scalar mean loss
  kLlamaBlock,  // pre-RMSNorm: x + attn(attn_norm(x)) with rope and grouped-query heads; x + swiglu(mlp_norm(x))
  kRmsNorm,     // final norm of a llama
};

std::string_view block_kind_name(BlockKind kind);

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
  std::int64_t d_ff = 0;          // TransformerBlock, LlamaBlock (ffn_hidden_size)
  std::int64_t n_kv_heads = 0;    // LlamaBlock (key/value heads; divides n_heads)
  double rope_theta = 0;          // LlamaBlock
  double norm_eps = 0;            // LlamaBlock, RmsNorm
  std::int64_t kernel = 0;        // Conv2d kernel, MaxPool window
  bool tied = false;              // LmHead shares the Embedding's token table
};

struct ModelSpec {
  ModelType type = ModelType::kGpt;
  GptConfig gpt;
  MlpConfig mlp;
  CnnConfig cnn;
  LlamaConfig llama;  // resolved (llama_defaults)
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
  struct TokenSizes {
    std::int64_t vocab_size, d_model, n_layers, n_heads, seq_len, d_ff;
    bool tie_embeddings;
  };
  TokenSizes token_sizes() const;
};

// Builders check their sizes and throw ConfigKeyError (engine/core/error.hpp) naming the model.* key and
// the numbers; config validation calls them, so a rule is written once.
ModelSpec make_gpt_spec(const GptConfig& config);
ModelSpec make_mlp_spec(const MlpConfig& config);
ModelSpec make_cnn_spec(const CnnConfig& config);
ModelSpec make_llama_spec(const LlamaConfig& config);

}  // namespace cleave::partition
