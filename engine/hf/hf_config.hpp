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
//   MixtralForCausalLM (engine/hf/families/mixtral.cpp): Llama's keys (rms_norm_eps default 1e-5, rope_theta
//     default 1e6) plus num_local_experts -> n_experts, num_experts_per_tok -> top_k, router_aux_loss_coef
//     (default 0.001) -> aux_loss_coef, router_z_loss_coef (default 0) -> z_loss_coef; the model section is
//     type "moe", router "softmax", normalize_top_k true, n_shared_experts 0; router_jitter_noise must be 0 and
//     sliding_window null or >= max_position_embeddings.
// Export (hf_config_json) writes the same keys back, with architectures, model_type and torch_dtype, so that
// read_hf_config(hf_config_json(m)) gives m again.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/hf/hf_layout.hpp"

namespace cleave::hf {

// Cleave's GPT LayerNorm epsilon (layers/layernorm.hpp); a GPT-2 with another one would compute differently.
inline constexpr double kGptLayerNormEps = 1e-5;

struct HfModelConfig {
  ModelDims dims;
  nlohmann::json model;  // the Cleave model section it determines: {"type": "gpt" | "llama", ...}
};

// `config` is config.json's parsed document; `path` names it in messages. Throws Error.
HfModelConfig read_hf_config(const nlohmann::json& config, const std::string& path);

// The sizes of a Cleave model section (index.json "model"); `origin` names it in messages. Throws Error for a
// model type HF export does not cover (mlp, cnn).
ModelDims dims_of_model(const nlohmann::json& model, const std::string& origin);

// config.json for a Cleave model section; torch_dtype "float32" or "bfloat16".
nlohmann::json hf_config_json(const nlohmann::json& model, std::string_view torch_dtype);

}  // namespace cleave::hf
