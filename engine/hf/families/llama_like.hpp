// What LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM share at the Hugging Face level:
// the four are one Cleave family (model.type "llama") and differ only in a sliding window (Mistral), q/k/v biases
// (Qwen2) and per-head q/k norms (Qwen3); the moe rows (mixtral.cpp, qwen3_moe.cpp) read their attention here too.
// Internal to engine/hf/families/.
//
// Invariant: read_llama_like refuses (one Error naming config.json and the key) every setting of the variant
// that Cleave would compute differently, so an imported model gives transformers' logits; write_llama_like
// writes the keys read_llama_like reads, so reading them back gives the same model section.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf::llama_like {

struct Variant {
  Architecture architecture = Architecture::kLlama;
  bool sliding_window = false;  // Mistral: sliding_window (null = none) is read
  bool qwen2 = false;           // Qwen2: q/k/v biases always; use_sliding_window must be false
  bool qk_norm = false;         // Qwen3 (and Qwen3-MoE): q_norm / k_norm always; attention_bias and
                                // use_sliding_window must be false
};

HfModelConfig read(const Keys& config, const Variant& variant);
void model_dims(const Keys& model, ModelDims& dims);
void write(const Variant& variant, const ModelDims& dims, const nlohmann::json& model, nlohmann::json& out);
std::vector<TensorMap> tensor_map(const ModelDims& dims);
bool is_buffer(std::string_view hf_name);
// The attention's tensors of block i (q, k, v, o; biases where dims.qkv_bias; q/k norms where dims.qk_norm).
void add_attention(std::vector<TensorMap>& out, const ModelDims& dims, std::int64_t i);
std::string canonical_name(const std::string& hf_name);
// The row a llama-like class starts from: model.type "llama", the token table "model.embed_tokens.weight", and this
// file's sizes, tensor map, buffers and names. The class's own file sets its keys, read_config, holds and
// write_config (the table asserts that every function pointer is set).
HfArchitecture architecture(Architecture architecture, std::string_view class_name, std::string_view model_type,
                            std::string_view export_note = {});

// A dense class's row (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM): architecture()'s
// for V.architecture, with read_config and write_config this file's read and write of the class's Variant V. The
// class's own file sets its keys and holds.
template <const Variant& V>
HfArchitecture dense_architecture(std::string_view class_name, std::string_view model_type,
                                  std::string_view export_note = {}) {
  HfArchitecture a = architecture(V.architecture, class_name, model_type, export_note);
  a.read_config = [](const Keys& k) { return read(k, V); };
  a.write_config = [](const ModelDims& d, const nlohmann::json& model, nlohmann::json& out) {
    write(V, d, model, out);
  };
  return a;
}

}  // namespace cleave::hf::llama_like
