// The llama family at the Hugging Face level: transformers' LlamaForCausalLM (hf_layout.hpp lists its names,
// hf_config.hpp its config.json keys). Its row of the architecture table (hf_architecture.hpp); what it shares
// with Mistral and Qwen2 is in llama_like.cpp.
#include <array>

#include "engine/hf/families/llama_like.hpp"

namespace cleave::hf {
namespace {

constexpr llama_like::Variant kLlamaVariant{Architecture::kLlama, false, false};

// The config.json keys LlamaForCausalLM reads that hf_config.cpp's common list does not hold.
constexpr std::array<std::string_view, 20> kLlamaKeys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "attention_bias", "mlp_bias",       "pretraining_tp",    "rope_theta",          "rope_scaling",
    "rope_parameters", "rms_norm_eps",  "attention_dropout", "layer_types",
    "sliding_window"};  // read to refuse a relabelled Mistral

// No window, no biases.
bool llama_holds(const ModelDims& d, const nlohmann::json& model) {
  return !d.qkv_bias && !d.qk_norm && model.value("sliding_window", std::int64_t{0}) == 0;
}

}  // namespace

HfArchitecture llama_architecture() {
  HfArchitecture a = llama_like::dense_architecture<kLlamaVariant>("LlamaForCausalLM", "llama");
  a.keys = kLlamaKeys;
  a.holds = llama_holds;
  return a;
}

}  // namespace cleave::hf
