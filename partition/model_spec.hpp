// ModelSpec: the model as the partitioner sees it — pure data, no devices, no layers.
//
// A model is an ordered list of blocks; each block names its kind, its sizes and the per-sample shape of
// the tensor crossing its input and output boundary (the batch dimension is left out). A pipeline stage
// is a contiguous range of blocks. The cost model (cost_model.hpp) and the layer builders
// (layers/models/) both read this and nothing else, so a plan can be made without building a model.
//
// Block order for each model type:
//   gpt: embedding, transformer × n_layers, final layernorm, lm head, softmax cross-entropy
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
enum class ModelType { kGpt, kMlp, kCnn };
constexpr std::array<EnumName<ModelType>, 3> enum_names(ModelType) {
  return {{{ModelType::kGpt, "gpt"}, {ModelType::kMlp, "mlp"}, {ModelType::kCnn, "cnn"}}};
}

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
  std::int64_t seq_len = 0;       // Embedding (positions), TransformerBlock
  std::int64_t n_heads = 0;       // TransformerBlock
  std::int64_t d_ff = 0;          // TransformerBlock
  std::int64_t kernel = 0;        // Conv2d kernel, MaxPool window
  bool tied = false;              // LmHead shares the Embedding's token table
};

struct ModelSpec {
  ModelType type = ModelType::kGpt;
  GptConfig gpt;
  MlpConfig mlp;
  CnnConfig cnn;
  std::vector<BlockSpec> blocks;
  // Logical names of parameters that two blocks share (a tied LM head reads the embedding's token table,
  // "embed.token"). Layouts that split such a parameter's users over pp ranks keep two copies and sum their
  // gradients; norms count it once. Empty when nothing is tied.
  std::vector<std::string> tied_parameters;
  // Unit of throughput figures: "tok" when a sample is a token sequence, "samples" otherwise.
  std::string_view throughput_unit() const { return type == ModelType::kGpt ? "tok" : "samples"; }

  Shape sample_input() const { return blocks.front().input; }  // per-sample input shape
  DType input_dtype() const { return blocks.front().input_dtype; }
  // Tokens (gpt) or samples (mlp, cnn) that one sample of the batch contributes to throughput figures.
  std::int64_t items_per_sample() const { return type == ModelType::kGpt ? gpt.seq_len : 1; }
};

// Builders check their sizes and throw ConfigKeyError (engine/core/error.hpp) naming the model.* key and
// the numbers; config validation calls them, so a rule is written once.
ModelSpec make_gpt_spec(const GptConfig& config);
ModelSpec make_mlp_spec(const MlpConfig& config);
ModelSpec make_cnn_spec(const CnnConfig& config);

}  // namespace cleave::partition
