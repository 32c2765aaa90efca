// What MixtralForCausalLM and Qwen3MoeForCausalLM share at the Hugging Face level: both are Cleave's moe family
// (model.type "moe", a softmax router, no shared experts) with Llama's attention (llama_like.hpp; Qwen3-MoE adds
// the per-head q/k norms), and differ in their expert tensors' names and their config keys. Internal to
// engine/hf/families/.
//
// Invariant: to_moe_section turns a llama_like model section into the moe one the config reader takes (the keys
// the moe section has; max_seq_len kept, seq_len min(max_position_embeddings, kImportSeqLen) as llama's), and
// model_dims refuses (one Error naming the key) any moe section neither class can express.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf::moe_like {

// The routing a class reads: experts, experts per token, renormalisation, the auxiliary loss coefficient.
struct Routing {
  std::int64_t n_experts = 0;
  std::int64_t top_k = 0;
  bool normalize_top_k = true;
  double aux_loss_coef = 0.001;
  double z_loss_coef = 0.0;
};

// out.model (llama_like::read's) becomes a moe section with `routing`; checks top_k <= n_experts (naming
// `experts_key` and num_experts_per_tok in k's file).
void to_moe_section(const Keys& k, const char* experts_key, const Routing& routing, HfModelConfig& out);

// A moe model section's sizes (llama_like::model_dims plus n_experts, top_k); refuses a router other than softmax
// and shared experts, which neither class has.
void model_dims(const Keys& model, ModelDims& dims);

// The HF names of a class's expert tensors: "<block>.<router>.weight" [E, D] and
// "<block>.experts.{j}.<gate|up|down>.weight".
struct ExpertNames {
  const char* block;   // "block_sparse_moe" | "mlp"
  const char* router;  // "gate"
  const char* gate;    // "w1" | "gate_proj"
  const char* up;      // "w3" | "up_proj"
  const char* down;    // "w2" | "down_proj"
};

// Every tensor of the model, in Cleave's block order: llama's attention and norms, the router, the experts.
std::vector<TensorMap> tensor_map(const ModelDims& dims, const ExpertNames& names);

}  // namespace cleave::hf::moe_like
