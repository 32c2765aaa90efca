// Hugging Face config.json <-> Cleave's model section (as JSON, the form index.json and the run config hold).
//
// Import (read_hf_config): the architecture ("architectures"[0], else "model_type"), the sizes, and every
// setting that changes the maths Cleave would compute differently is checked, each refusal one Error naming
// config.json, the key, its value and what Cleave computes:
//   GPT2LMHeadModel: vocab_size, n_embd -> d_model, n_layer -> n_layers, n_head -> n_heads, n_positions ->
//     seq_len, n_inner (null: 4·n_embd) -> d_ff, tie_word_embeddings (default true) -> tie_embeddings;
//     activation_function must be gelu_new (or gelu_pytorch_tanh, the same tanh form: Cleave's GELU),
//     layer_norm_epsilon must be Cleave's LayerNorm eps 1e-5, scale_attn_weights true,
//     scale_attn_by_inverse_layer_idx and add_cross_attention false.
//   LlamaForCausalLM: vocab_size, hidden_size -> d_model, num_hidden_layers -> n_layers, num_attention_heads ->
//     n_heads, num_key_value_heads (default n_heads) -> n_kv_heads, intermediate_size -> ffn_hidden_size,
//     rope_theta (or rope_parameters.rope_theta; default 10000) -> rope_theta, rms_norm_eps (default 1e-6) ->
//     norm_eps, max_position_embeddings -> seq_len, tie_word_embeddings (default false) -> tie_embeddings;
//     hidden_act must be silu, attention_bias and mlp_bias false, rope scaling absent or "default", head_dim
//     absent or hidden_size / num_attention_heads.
//   MistralForCausalLM: Llama's keys (no attention_bias / mlp_bias) plus sliding_window (null: none) ->
//     sliding_window. Qwen2ForCausalLM: Llama's keys with q/k/v biases -> qkv_bias true; use_sliding_window
//     true -> sliding_window from block sliding_window_from_layer (max_window_layers) on; false: sliding_window
//     and max_window_layers mean nothing. A LlamaForCausalLM whose
//     config.json sets sliding_window (a relabelled Mistral) is refused; so is a model_type that is not the
//     class's, a layer_types entry other than the one attention Cleave runs, and rope keys it does not know.
//   MixtralForCausalLM (engine/hf/families/mixtral.cpp): Llama's keys (no attention_bias / mlp_bias;
//     rms_norm_eps default 1e-5, rope_theta default 1e6) plus num_local_experts -> n_experts,
//     num_experts_per_tok -> top_k, router_aux_loss_coef (default 0.001) -> aux_loss_coef, router_z_loss_coef
//     (default 0) -> z_loss_coef; the model section is type "moe", router "softmax", normalize_top_k true,
//     n_shared_experts 0; router_jitter_noise must be 0 and sliding_window null or >= max_position_embeddings.
//   Qwen3ForCausalLM (qwen3.cpp): Qwen2's keys without biases (attention_bias must be false) -> qk_norm true.
//   Qwen3MoeForCausalLM (qwen3_moe.cpp): Qwen3's attention keys, moe_intermediate_size -> ffn_hidden_size,
//     num_experts (or num_local_experts) -> n_experts, num_experts_per_tok -> top_k, norm_topk_prob (default
//     false) -> normalize_top_k, router_aux_loss_coef -> aux_loss_coef; decoder_sparse_step must be 1 and
//     mlp_only_layers empty (no dense layers between the mixtures).
//   Qwen2MoeForCausalLM (qwen2_moe.cpp): Qwen3-MoE's keys without q/k norms, qkv_bias (default true) -> qkv_bias,
//     shared_expert_intermediate_size S -> n_shared_experts S / moe_intermediate_size (S must be a positive
//     multiple of it) with shared_expert_gate true, norm_topk_prob (default false); use_sliding_window false.
//   Llama-like classes (the moe ones too): seq_len is min(max_position_embeddings, kImportSeqLen) and max_seq_len
//     max_position_embeddings (rotary positions: any seq_len up to it trains the same weights). GPT-2: seq_len
//     is n_positions (the learned table; a run at a shorter seq_len slices it).
//   Every other key must be in the class's list (hf_architecture.hpp) or the common list in hf_config.cpp
//     (PretrainedConfig's bookkeeping and generation keys, token ids): an unknown key is refused by name, as
//     Cleave cannot know it leaves the numbers alone. Keys Cleave reads but gives no meaning (dropout) are
//     returned as notes for the caller to print.
// Export (hf_config_json) writes the same keys back, with architectures, model_type and dtype, so that
// read_hf_config(hf_config_json(m)) gives m again; given the source's config.json (the model was imported),
// it starts from that document, so the keys Cleave does not compute (token ids, dropout, transformers_version)
// are carried, keeps the source's value of each key Cleave computes when the document still reads as the same
// model with it (head_dim null, a MoE's unused intermediate_size, n_inner null; never dtype, the class or
// n_ctx), and differs from it only as docs/checkpoints.md lists.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/hf/hf_layout.hpp"

namespace cleave::hf {

// Cleave's GPT LayerNorm epsilon (layers/layernorm.hpp); a GPT-2 with another one would compute differently.
inline constexpr double kGptLayerNormEps = 1e-5;

// The default model.seq_len of an imported llama-like model: min(max_position_embeddings, this). 1024 is
// GPT-2's context and a common fine-tuning length for small models; a whole 8192 or 131072 would plan
// gigabytes of activations per sample (the attention probabilities grow with seq_len squared) before anyone
// asked for it. model.seq_len (or --set) chooses any length up to the maximum.
inline constexpr std::int64_t kImportSeqLen = 1024;
inline std::int64_t import_seq_len(std::int64_t max_positions) {
  return max_positions < kImportSeqLen ? max_positions : kImportSeqLen;
}

struct HfModelConfig {
  ModelDims dims;
  nlohmann::json model;  // the Cleave model section it determines: {"type": "gpt" | "llama", ...}
  std::vector<std::string> notes;  // keys read that have no Cleave meaning (dropout), one sentence each
};

// `config` is config.json's parsed document; `path` names it in messages. Throws Error.
HfModelConfig read_hf_config(const nlohmann::json& config, const std::string& path);

// The sizes of a Cleave model section (index.json "model"); `origin` names it in messages. Throws InputError
// (exit 64: the checkpoint named is what is wrong) for a model type HF export does not cover (mlp, cnn) or a model
// no class holds, before anything is written. The architecture
// is `preferred_class` when that class holds the model, else the first row that does.
ModelDims dims_of_model(const nlohmann::json& model, const std::string& origin, std::string_view preferred_class = {});

// config.json for a Cleave model section; dtype "float32" or "bfloat16". `source`: the config.json the model
// was imported from (null: none; see above).
nlohmann::json hf_config_json(const nlohmann::json& model, std::string_view dtype,
                              const nlohmann::json& source = nlohmann::json());

}  // namespace cleave::hf
