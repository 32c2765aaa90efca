// transformers' MistralForCausalLM at the Hugging Face level: Llama's tensors and keys (llama_like.cpp) plus
// sliding_window (null: none, then the model is exactly Llama), which Cleave runs as model.sliding_window.
// Its row of the architecture table (hf_architecture.hpp).
#include <array>

#include "engine/hf/families/llama_like.hpp"

namespace cleave::hf {
namespace {

constexpr llama_like::Variant kMistralVariant{Architecture::kMistral, true, false};

constexpr std::array<std::string_view, 18> kMistralKeys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "rope_theta",    "rope_scaling",    "rope_parameters",   "rms_norm_eps",        "attention_dropout",
    "layer_types",   "sliding_window",  "max_window_layers"};

bool mistral_holds(const ModelDims& d, const nlohmann::json& model) {
  return !d.qkv_bias && !d.qk_norm && model.value("sliding_window_from_layer", std::int64_t{0}) == 0;
}

}  // namespace

HfArchitecture mistral_architecture() {
  HfArchitecture a =
      llama_like::dense_architecture<kMistralVariant>("MistralForCausalLM", "mistral", " (with a sliding window)");
  a.keys = kMistralKeys;
  a.holds = mistral_holds;
  return a;
}

}  // namespace cleave::hf
