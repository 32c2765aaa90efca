// The Hugging Face level of the model-family table: one HfArchitecture row per transformers class Cleave
// imports and exports (GPT2LMHeadModel for the gpt family; LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM and Qwen3ForCausalLM for llama, told apart by model.sliding_window, model.qkv_bias and
// model.qk_norm; MixtralForCausalLM, Qwen3MoeForCausalLM and Qwen2MoeForCausalLM for moe, told apart by
// model.qk_norm and the shared experts: Qwen2-MoE's sigmoid-gated one). hf_config.cpp,
// hf_layout.cpp and hf_import.cpp ask this table instead of switching on Architecture.
//
// A family's home at this level is engine/hf/families/<architecture>.cpp: the config.json keys it reads and
// refuses (read_config), the keys it writes back (write_config), its tensor name map and its buffers. The
// rows are listed explicitly in hf_architecture.cpp (no static self-registration).
//
// Invariants: hf_architecture(a).architecture == a; every function pointer is set; read_config of the
// config.json that write_config wrote gives the same ModelDims and model section (hf_config.hpp).
//
// Adding an architecture: an Architecture value (hf_layout.hpp), engine/hf/families/<architecture>.cpp, a row
// in hf_architecture.cpp, its keys in hf_config.hpp's header comment and docs/hf.md.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/hf/hf_config.hpp"
#include "engine/hf/hf_keys.hpp"
#include "engine/hf/hf_layout.hpp"

namespace cleave::hf {

struct HfArchitecture {
  Architecture architecture{};
  std::string_view class_name;   // transformers' class: "GPT2LMHeadModel"
  std::string_view model_type;   // config.json "model_type": "gpt2"
  std::string_view cleave_type;  // the Cleave family it maps to (model.type): "gpt"
  std::string_view embedding;    // the HF name of the token table: "transformer.wte.weight"
  std::string_view export_note;  // when it exports, beside another row of the same family: " (with q/k/v biases)"
  // Every config.json key the class reads, checks or knows to be harmless, besides hf_config.cpp's common
  // ones (PretrainedConfig's generation and bookkeeping keys); any other key is refused by name, since Cleave
  // cannot know it leaves the numbers alone.
  std::span<const std::string_view> keys;
  // config.json -> the sizes and the Cleave model section; refuses (Error naming the key) every setting Cleave
  // would compute differently.
  HfModelConfig (*read_config)(const Keys& config) = nullptr;
  // The family's own sizes of a Cleave model section (dims_of_model reads the shared ones first).
  void (*model_dims)(const Keys& model, ModelDims& dims) = nullptr;
  // Whether this class can express the model (llama: Llama neither a window nor biases, Mistral a window,
  // Qwen2 biases); export takes the source's class when it holds the model, else the first row that does.
  bool (*holds)(const ModelDims& dims, const nlohmann::json& model) = nullptr;
  // The family's own config.json keys for export (hf_config_json writes the shared ones).
  void (*write_config)(const ModelDims& dims, const nlohmann::json& model, nlohmann::json& out) = nullptr;
  // Every tensor, in Cleave's block order (hf_layout.hpp).
  std::vector<TensorMap> (*tensor_map)(const ModelDims& dims) = nullptr;
  // Buffers, not weights (skipped on import).
  bool (*is_buffer)(std::string_view hf_name) = nullptr;
  // A state-dict name as tensor_map spells it (GPT-2: a GPT2Model's names gain "transformer.").
  std::string (*canonical_name)(const std::string& hf_name) = nullptr;
};

// The row of `a`; asserts that the table has it.
const HfArchitecture& hf_architecture(Architecture a);
// Every row, in Architecture order.
std::span<const HfArchitecture> hf_architectures();
// "GPT2LMHeadModel and LlamaForCausalLM" / "gpt exports as GPT2LMHeadModel, llama as LlamaForCausalLM".
std::string hf_class_names();
std::string hf_export_names();

// The rows (engine/hf/families/).
HfArchitecture gpt2_architecture();
HfArchitecture llama_architecture();
HfArchitecture mistral_architecture();
HfArchitecture qwen2_architecture();
HfArchitecture mixtral_architecture();
HfArchitecture qwen3_architecture();
HfArchitecture qwen3_moe_architecture();
HfArchitecture qwen2_moe_architecture();

}  // namespace cleave::hf
