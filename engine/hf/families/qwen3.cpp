// transformers' Qwen3ForCausalLM at the Hugging Face level: Llama's tensors and keys (llama_like.cpp) with a
// per-head RMSNorm of q and k before the rotary embedding (self_attn.q_norm / k_norm, [head_dim] each), which
// Cleave runs as model.qk_norm. attention_bias (biases on q, k, v and o) and use_sliding_window must be false;
// sliding_window and max_window_layers mean nothing then and are written back as they were. Its row of the
// architecture table (hf_architecture.hpp).
#include <array>

#include "engine/hf/families/llama_like.hpp"

namespace cleave::hf {
namespace {

constexpr llama_like::Variant kQwen3Variant{Architecture::kQwen3, false, false, true};

constexpr std::array<std::string_view, 20> kQwen3Keys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "rope_theta",    "rope_scaling",    "rope_parameters",   "rms_norm_eps",        "attention_dropout",
    "layer_types",   "use_sliding_window", "sliding_window", "max_window_layers",   "attention_bias"};

bool qwen3_holds(const ModelDims& d, const nlohmann::json& model) {
  return d.qk_norm && !d.qkv_bias && model.value("sliding_window", std::int64_t{0}) == 0;
}

}  // namespace

HfArchitecture qwen3_architecture() {
  HfArchitecture a = llama_like::dense_architecture<kQwen3Variant>("Qwen3ForCausalLM", "qwen3", " (with q/k norms)");
  a.keys = kQwen3Keys;
  a.holds = qwen3_holds;
  return a;
}

}  // namespace cleave::hf
