// The keys of the model-family table (family.hpp): ModelType names a family (model.type), BlockKind names
// one block of a ModelSpec. Both are plain enums so specs, plans and configs stay data.
//
// Invariant: every ModelType has exactly one row in the family table (family.cpp) and every BlockKind a
// family owns has exactly one row in the block table (family.cpp); the tables are checked against these
// enums when first consulted. The common block kinds (embedding ... rmsnorm, the library every family
// composes) are costed by partition/cost_model.cpp and built by layers/models/builder.cpp; a family's own
// kinds (transformer_block, llama_block) carry their costs, work and tensor-parallel traffic in the family's
// files (partition/families/<family>_block.cpp) and their layer builders in layers/families/.
//
// Adding a family: one ModelType value with its name here, one BlockKind per block the family owns, then the
// rows in family.cpp (and layers/families/table.cpp); docs/architecture.md "Model families" has the list.
#pragma once

#include <array>
#include <string_view>

#include "engine/core/enum_names.hpp"

namespace cleave::partition {

// model.type: which family (and which config struct of FamilyConfigs) is built.
enum class ModelType { kGpt, kMlp, kCnn, kLlama, kMoe };
constexpr std::array<EnumName<ModelType>, 5> enum_names(ModelType) {
  return {{{ModelType::kGpt, "gpt"},
           {ModelType::kMlp, "mlp"},
           {ModelType::kCnn, "cnn"},
           {ModelType::kLlama, "llama"},
           {ModelType::kMoe, "moe"}}};
}

enum class BlockKind {
  kEmbedding,         // token (+ learned position) embedding: [T] i32 -> [T, D]
  kTransformerBlock,  // gpt's block: pre-LN: x + attn(ln1(x)); x + mlp(ln2(x))
  kLayerNorm,         // final norm
  kLmHead,            // [T, D] -> [T, V] (tied to the embedding when tie_embeddings)
  kLinear,            // [F_in] -> [F_out]
  kRelu,
  kGelu,
  kConv2d,   // [C, H, W] -> [C', H, W]
  kMaxPool,  // [C, H, W] -> [C, H / pool, W / pool]
  kFlatten,  // [C, H, W] -> [C * H * W]
  kSoftmaxCrossEntropy,  // logits [.., K] + integer targets -> scalar mean loss
  kLlamaBlock,  // llama's block: pre-RMSNorm: x + attn(attn_norm(x)) with rope and grouped-query heads; x + swiglu(mlp_norm(x))
  kRmsNorm,     // final norm of a llama
  kMoeBlock,    // moe's block: llama attention; x + moe(mlp_norm(x)), k of E SwiGLU experts per token
};

constexpr std::array<EnumName<BlockKind>, 14> enum_names(BlockKind) {
  return {{{BlockKind::kEmbedding, "embedding"},
           {BlockKind::kTransformerBlock, "transformer_block"},
           {BlockKind::kLayerNorm, "layernorm"},
           {BlockKind::kLmHead, "lm_head"},
           {BlockKind::kLinear, "linear"},
           {BlockKind::kRelu, "relu"},
           {BlockKind::kGelu, "gelu"},
           {BlockKind::kConv2d, "conv2d"},
           {BlockKind::kMaxPool, "maxpool"},
           {BlockKind::kFlatten, "flatten"},
           {BlockKind::kSoftmaxCrossEntropy, "softmax_cross_entropy"},
           {BlockKind::kLlamaBlock, "llama_block"},
           {BlockKind::kRmsNorm, "rmsnorm"},
           {BlockKind::kMoeBlock, "moe_block"}}};
}
constexpr std::string_view block_kind_name(BlockKind kind) { return enum_name(kind); }

}  // namespace cleave::partition
