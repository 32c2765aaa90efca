// What MixtralForCausalLM, Qwen3MoeForCausalLM and Qwen2MoeForCausalLM share at the Hugging Face level: all are
// Cleave's moe family (model.type "moe", a softmax router) with Llama's attention (llama_like.hpp; Qwen3-MoE adds
// the per-head q/k norms, Qwen2-MoE q/k/v biases and a sigmoid-gated shared expert), and differ in their expert
// tensors' names and their config keys. Internal to engine/hf/families/.
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
  std::int64_t n_shared_experts = 0;  // the shared SwiGLU's width over the experts' (Qwen2-MoE)
  bool shared_expert_gate = false;    // Qwen2-MoE's sigmoid gate on it
};

// out.model (llama_like::read's) becomes a moe section with `routing`; checks top_k <= n_experts (naming
// `experts_key` and num_experts_per_tok in k's file).
void to_moe_section(const Keys& k, const char* experts_key, const Routing& routing, HfModelConfig& out);

// A moe model section's sizes (llama_like::model_dims plus n_experts, top_k, the shared experts); refuses (naming
// the key) what no moe class holds: a router other than softmax, ungated shared experts, shared experts with
// q/k norms, q/k/v biases without the gated shared expert, normalize_top_k false with neither.
void model_dims(const Keys& model, ModelDims& dims);

// The routing keys Qwen2MoeConfig and Qwen3MoeConfig share (num_experts_per_tok, norm_topk_prob with their default
// false, router_aux_loss_coef), with the expert count read from `experts_key`.
Routing read_qwen_routing(const Keys& k, const char* experts_key);

// The config keys Qwen2MoeConfig and Qwen3MoeConfig share, written from a moe model section: the expert width (also
// as the dense width: there are no dense layers), the routing, every layer sparse, no router logits, no window.
void write_qwen_moe_keys(const ModelDims& dims, const nlohmann::json& model, nlohmann::json& out);

// The HF names of a class's expert tensors: "<block>.<router>.weight" [E, D] and
// "<block>.experts.{j}.<gate|up|down>.weight".
struct ExpertNames {
  const char* block;   // "block_sparse_moe" | "mlp"
  const char* router;  // "gate"
  const char* gate;    // "w1" | "gate_proj"
  const char* up;      // "w3" | "up_proj"
  const char* down;    // "w2" | "down_proj"
  // Qwen2-MoE: "<block>.<shared>.{gate,up,down}_proj.weight" and "<block>.<shared_gate>.weight" [1, D].
  const char* shared = nullptr;       // "shared_expert"
  const char* shared_gate = nullptr;  // "shared_expert_gate"
};

// Every tensor of the model, in Cleave's block order: llama's attention and norms, the router, the experts, the
// shared experts and their gate (where dims has them).
std::vector<TensorMap> tensor_map(const ModelDims& dims, const ExpertNames& names);

// The row a moe class starts from: llama_like::architecture's with model.type "moe" and this file's model_dims. The
// class's own file sets its keys, read_config, holds, write_config and tensor_map (this file's with its ExpertNames).
HfArchitecture architecture(Architecture architecture, std::string_view class_name, std::string_view model_type,
                            std::string_view export_note = {});

}  // namespace cleave::hf::moe_like
