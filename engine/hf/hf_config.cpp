// read_hf_config, dims_of_model, hf_config_json (hf_config.hpp): the keys every architecture shares here, each
// architecture's own through its row of the architecture table (hf_architecture.hpp, engine/hf/families/).
#include "engine/hf/hf_config.hpp"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;

Architecture architecture_of(const json& config, const std::string& path) {
  std::string name;
  if (auto it = config.find("architectures"); it != config.end() && it->is_array() && !it->empty()) {
    CLEAVE_CHECK(it->size() == 1 && it->front().is_string(), "{}: architectures must list one class name, got {}",
                 path, it->dump());
    name = it->front().get<std::string>();
    for (const HfArchitecture& a : hf_architectures()) {
      if (name == a.class_name) return a.architecture;
    }
  } else if (auto type = config.find("model_type"); type != config.end() && type->is_string()) {
    name = "model_type " + type->get<std::string>();
    for (const HfArchitecture& a : hf_architectures()) {
      if (*type == a.model_type) return a.architecture;
    }
  } else {
    CLEAVE_THROW("{}: names no architecture (neither \"architectures\" nor \"model_type\")", path);
  }
  CLEAVE_THROW("{}: architecture {} is not supported; cleave imports {}", path, name, hf_class_names());
}

}  // namespace

HfModelConfig read_hf_config(const json& config, const std::string& path) {
  CLEAVE_CHECK(config.is_object(), "{}: expected a JSON object, got {}", path, config.type_name());
  const Architecture a = architecture_of(config, path);
  const Keys k(config, path);
  return hf_architecture(a).read_config(k);
}

ModelDims dims_of_model(const json& model, const std::string& origin) {
  const Keys k(model, origin + " model section");
  const std::string type = k.text_or("type", "gpt");
  const HfArchitecture* arch = nullptr;
  for (const HfArchitecture& a : hf_architectures()) {
    if (type == a.cleave_type) arch = &a;
  }
  CLEAVE_CHECK(arch != nullptr, "{}: model.type \"{}\" has no Hugging Face counterpart ({})", origin, type,
               hf_export_names());
  ModelDims d;
  d.vocab_size = k.size("vocab_size");
  d.d_model = k.size("d_model");
  d.n_layers = k.size("n_layers");
  d.n_heads = k.size("n_heads");
  d.seq_len = k.size("seq_len");
  d.tied = k.flag_or("tie_embeddings", true);
  d.architecture = arch->architecture;
  arch->model_dims(k, d);
  return d;
}

json hf_config_json(const json& model, std::string_view torch_dtype) {
  const ModelDims d = dims_of_model(model, "export");
  json out;
  out["architectures"] = {std::string(architecture_class(d.architecture))};
  out["model_type"] = std::string(architecture_model_type(d.architecture));
  out["vocab_size"] = d.vocab_size;
  out["tie_word_embeddings"] = d.tied;
  out["torch_dtype"] = std::string(torch_dtype);
  out["bos_token_id"] = nullptr;  // Cleave models carry no special tokens
  out["eos_token_id"] = nullptr;
  hf_architecture(d.architecture).write_config(d, model, out);
  return out;
}

}  // namespace cleave::hf
