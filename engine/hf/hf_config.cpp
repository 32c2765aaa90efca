// read_hf_config, dims_of_model, hf_config_json (hf_config.hpp).
#include "engine/hf/hf_config.hpp"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;

// One config.json (or model section) being read; every message names `origin_` and the key.
class Keys {
 public:
  Keys(const json& doc, std::string origin) : doc_(doc), origin_(std::move(origin)) {}

  const json* find(const std::string& key) const {
    auto it = doc_.find(key);
    return it == doc_.end() || it->is_null() ? nullptr : &*it;
  }
  std::int64_t size(const std::string& key) const {
    const json* v = find(key);
    CLEAVE_CHECK(v != nullptr, "{}: {} is missing (a size every model of this architecture needs)", origin_, key);
    return positive(key, *v);
  }
  std::int64_t size_or(const std::string& key, std::int64_t fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : positive(key, *v);
  }
  double number_or(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    CLEAVE_CHECK(v->is_number(), "{}: {} must be a number, got {}", origin_, key, v->dump());
    return v->get<double>();
  }
  bool flag_or(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    CLEAVE_CHECK(v->is_boolean(), "{}: {} must be true or false, got {}", origin_, key, v->dump());
    return v->get<bool>();
  }
  std::string text_or(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    CLEAVE_CHECK(v->is_string(), "{}: {} must be a string, got {}", origin_, key, v->dump());
    return v->get<std::string>();
  }
  // A setting whose every other value makes a model Cleave computes differently.
  template <typename T>
  void require(const std::string& key, const T& got, const T& cleave, std::string_view why) const {
    CLEAVE_CHECK(got == cleave, "{}: {} is {}, but Cleave needs {} ({}); this checkpoint cannot be imported", origin_,
                 key, json(got).dump(), json(cleave).dump(), why);
  }
  const std::string& origin() const { return origin_; }

 private:
  std::int64_t positive(const std::string& key, const json& v) const {
    CLEAVE_CHECK(v.is_number_integer() && v.get<std::int64_t>() > 0, "{}: {} must be a positive integer, got {}",
                 origin_, key, v.dump());
    return v.get<std::int64_t>();
  }
  const json& doc_;
  std::string origin_;
};

Architecture architecture_of(const json& config, const std::string& path) {
  std::string name;
  if (auto it = config.find("architectures"); it != config.end() && it->is_array() && !it->empty()) {
    CLEAVE_CHECK(it->size() == 1 && it->front().is_string(), "{}: architectures must list one class name, got {}",
                 path, it->dump());
    name = it->front().get<std::string>();
    if (name == architecture_class(Architecture::kGpt2)) return Architecture::kGpt2;
    if (name == architecture_class(Architecture::kLlama)) return Architecture::kLlama;
  } else if (auto type = config.find("model_type"); type != config.end() && type->is_string()) {
    name = "model_type " + type->get<std::string>();
    if (*type == architecture_model_type(Architecture::kGpt2)) return Architecture::kGpt2;
    if (*type == architecture_model_type(Architecture::kLlama)) return Architecture::kLlama;
  } else {
    CLEAVE_THROW("{}: names no architecture (neither \"architectures\" nor \"model_type\")", path);
  }
  CLEAVE_THROW("{}: architecture {} is not supported; cleave imports GPT2LMHeadModel and LlamaForCausalLM", path,
               name);
}

HfModelConfig read_gpt2(const Keys& k) {
  HfModelConfig out;
  ModelDims& d = out.dims;
  d.architecture = Architecture::kGpt2;
  d.vocab_size = k.size("vocab_size");
  d.d_model = k.size("n_embd");
  d.n_layers = k.size("n_layer");
  d.n_heads = k.size("n_head");
  d.n_kv_heads = d.n_heads;
  d.seq_len = k.find("n_positions") != nullptr ? k.size("n_positions") : k.size("n_ctx");
  d.ffn = k.size_or("n_inner", 4 * d.d_model);
  d.tied = k.flag_or("tie_word_embeddings", true);
  CLEAVE_CHECK(d.d_model % d.n_heads == 0, "{}: n_embd {} is not divisible by n_head {}", k.origin(), d.d_model,
               d.n_heads);
  const std::string act = k.text_or("activation_function", "gelu_new");
  CLEAVE_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
               "{}: activation_function is \"{}\", but Cleave's GELU is the tanh approximation (\"gelu_new\"); this "
               "checkpoint cannot be imported",
               k.origin(), act);
  k.require("layer_norm_epsilon", k.number_or("layer_norm_epsilon", 1e-5), kGptLayerNormEps,
            "the eps of its GPT LayerNorm");
  k.require("scale_attn_weights", k.flag_or("scale_attn_weights", true), true,
            "attention scores scaled by 1/sqrt(head size)");
  k.require("scale_attn_by_inverse_layer_idx", k.flag_or("scale_attn_by_inverse_layer_idx", false), false,
            "no per-layer attention scaling");
  k.require("add_cross_attention", k.flag_or("add_cross_attention", false), false, "a decoder without cross-attention");
  out.model = {{"type", "gpt"},          {"vocab_size", d.vocab_size}, {"d_model", d.d_model},
               {"n_layers", d.n_layers}, {"n_heads", d.n_heads},       {"seq_len", d.seq_len},
               {"d_ff", d.ffn},          {"tie_embeddings", d.tied}};
  return out;
}

HfModelConfig read_llama(const Keys& k) {
  HfModelConfig out;
  ModelDims& d = out.dims;
  d.architecture = Architecture::kLlama;
  d.vocab_size = k.size("vocab_size");
  d.d_model = k.size("hidden_size");
  d.n_layers = k.size("num_hidden_layers");
  d.n_heads = k.size("num_attention_heads");
  d.n_kv_heads = k.size_or("num_key_value_heads", d.n_heads);
  d.ffn = k.size("intermediate_size");
  d.seq_len = k.size("max_position_embeddings");
  d.tied = k.flag_or("tie_word_embeddings", false);
  CLEAVE_CHECK(d.d_model % d.n_heads == 0, "{}: hidden_size {} is not divisible by num_attention_heads {}", k.origin(),
               d.d_model, d.n_heads);
  CLEAVE_CHECK(d.n_heads % d.n_kv_heads == 0,
               "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", k.origin(), d.n_heads,
               d.n_kv_heads);
  k.require("head_dim", k.size_or("head_dim", d.d_model / d.n_heads), d.d_model / d.n_heads,
            "head size hidden_size / num_attention_heads");
  k.require("hidden_act", k.text_or("hidden_act", "silu"), std::string("silu"), "SwiGLU with SiLU");
  k.require("attention_bias", k.flag_or("attention_bias", false), false, "its Llama has no attention biases");
  k.require("mlp_bias", k.flag_or("mlp_bias", false), false, "its Llama has no MLP biases");
  // transformers 4 keeps rope_theta and rope_scaling at the top level, 5 in rope_parameters.
  double theta = k.number_or("rope_theta", 10000.0);
  for (const char* section : {"rope_scaling", "rope_parameters"}) {
    const json* rope = k.find(section);
    if (rope == nullptr) continue;
    CLEAVE_CHECK(rope->is_object(), "{}: {} must be an object, got {}", k.origin(), section, rope->dump());
    const Keys r(*rope, fmt::format("{} {}", k.origin(), section));
    const std::string type = r.text_or("rope_type", r.text_or("type", "default"));
    CLEAVE_CHECK(type == "default", "{}: {}.rope_type is \"{}\", but Cleave's RoPE is the unscaled \"default\"; this "
                 "checkpoint cannot be imported", k.origin(), section, type);
    theta = r.number_or("rope_theta", theta);
  }
  out.model = {{"type", "llama"},
               {"vocab_size", d.vocab_size},
               {"d_model", d.d_model},
               {"n_layers", d.n_layers},
               {"n_heads", d.n_heads},
               {"n_kv_heads", d.n_kv_heads},
               {"seq_len", d.seq_len},
               {"ffn_hidden_size", d.ffn},
               {"rope_theta", theta},
               {"norm_eps", k.number_or("rms_norm_eps", 1e-6)},
               {"tie_embeddings", d.tied}};
  return out;
}

}  // namespace

HfModelConfig read_hf_config(const json& config, const std::string& path) {
  CLEAVE_CHECK(config.is_object(), "{}: expected a JSON object, got {}", path, config.type_name());
  const Architecture a = architecture_of(config, path);
  const Keys k(config, path);
  return a == Architecture::kGpt2 ? read_gpt2(k) : read_llama(k);
}

ModelDims dims_of_model(const json& model, const std::string& origin) {
  const Keys k(model, origin + " model section");
  const std::string type = k.text_or("type", "gpt");
  CLEAVE_CHECK(type == "gpt" || type == "llama",
               "{}: model.type \"{}\" has no Hugging Face counterpart (gpt exports as GPT2LMHeadModel, llama as "
               "LlamaForCausalLM)",
               origin, type);
  ModelDims d;
  d.vocab_size = k.size("vocab_size");
  d.d_model = k.size("d_model");
  d.n_layers = k.size("n_layers");
  d.n_heads = k.size("n_heads");
  d.seq_len = k.size("seq_len");
  d.tied = k.flag_or("tie_embeddings", true);
  if (type == "gpt") {
    d.architecture = Architecture::kGpt2;
    d.n_kv_heads = d.n_heads;
    d.ffn = k.size("d_ff");
  } else {
    d.architecture = Architecture::kLlama;
    d.n_kv_heads = k.size("n_kv_heads");
    d.ffn = k.size("ffn_hidden_size");
  }
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
  if (d.architecture == Architecture::kGpt2) {
    out["n_embd"] = d.d_model;
    out["n_layer"] = d.n_layers;
    out["n_head"] = d.n_heads;
    out["n_positions"] = d.seq_len;
    out["n_inner"] = d.ffn;
    out["activation_function"] = "gelu_new";
    out["layer_norm_epsilon"] = kGptLayerNormEps;
    out["scale_attn_weights"] = true;
    out["scale_attn_by_inverse_layer_idx"] = false;
    out["resid_pdrop"] = 0.0;  // Cleave trains without dropout
    out["embd_pdrop"] = 0.0;
    out["attn_pdrop"] = 0.0;
  } else {
    out["hidden_size"] = d.d_model;
    out["num_hidden_layers"] = d.n_layers;
    out["num_attention_heads"] = d.n_heads;
    out["num_key_value_heads"] = d.n_kv_heads;
    out["head_dim"] = d.d_model / d.n_heads;
    out["intermediate_size"] = d.ffn;
    out["max_position_embeddings"] = d.seq_len;
    out["hidden_act"] = "silu";
    out["rms_norm_eps"] = model.at("norm_eps");
    out["rope_theta"] = model.at("rope_theta");
    out["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", model.at("rope_theta")}};
    out["attention_bias"] = false;
    out["mlp_bias"] = false;
    out["attention_dropout"] = 0.0;
  }
  return out;
}

}  // namespace cleave::hf
