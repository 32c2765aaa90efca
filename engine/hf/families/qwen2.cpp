// transformers' Qwen2ForCausalLM at the Hugging Face level: Llama's tensors and keys (llama_like.cpp) with
// biases on q, k and v (always: Qwen2 has no attention_bias key), which Cleave runs as model.qkv_bias.
// use_sliding_window true gives model.sliding_window (sliding_window) from block model.sliding_window_from_layer
// (max_window_layers) on, as transformers' layer_types; false: sliding_window and max_window_layers mean nothing
// and are written back as they were.
// Its row of the architecture table (hf_architecture.hpp).
#include <array>

#include "engine/hf/families/llama_like.hpp"

namespace cleave::hf {
namespace {

constexpr llama_like::Variant kQwen2Variant{Architecture::kQwen2, false, true};

constexpr std::array<std::string_view, 19> kQwen2Keys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "rope_theta",    "rope_scaling",    "rope_parameters",   "rms_norm_eps",        "attention_dropout",
    "layer_types",   "use_sliding_window", "sliding_window", "max_window_layers"};

bool qwen2_holds(const ModelDims& d, const nlohmann::json&) { return d.qkv_bias && !d.qk_norm; }

}  // namespace

HfArchitecture qwen2_architecture() {
  HfArchitecture a = llama_like::dense_architecture<kQwen2Variant>("Qwen2ForCausalLM", "qwen2", " (with q/k/v biases)");
  a.keys = kQwen2Keys;
  a.holds = qwen2_holds;
  return a;
}

}  // namespace cleave::hf
