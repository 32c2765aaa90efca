// The gpt family at the Hugging Face level: transformers' GPT2LMHeadModel (hf_layout.hpp lists its names,
// hf_config.hpp its config.json keys). Its row of the architecture table (hf_architecture.hpp).
#include <array>

#include <fmt/format.h>

#include "engine/hf/families/map_util.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using map_util::add;
using map_util::add_conv1d;
using map_util::add_layernorm;
using nlohmann::json;

std::vector<TensorMap> gpt2_map(const ModelDims& m) {
  const std::int64_t d = m.d_model;
  std::vector<TensorMap> out;
  add(out, "transformer.wte.weight", {m.vocab_size, d}, "embed.token", {m.vocab_size, d});
  add(out, "transformer.wpe.weight", {m.seq_len, d}, "embed.position", {m.seq_len, d});
  for (std::int64_t i = 0; i < m.n_layers; ++i) {
    const std::string hf = fmt::format("transformer.h.{}.", i);
    const std::string ours = fmt::format("blocks.{}.", i);
    add_layernorm(out, hf + "ln_1", ours + "ln1", d);
    add_conv1d(out, hf + "attn.c_attn", ours + "attn.qkv", d, 3 * d);
    add_conv1d(out, hf + "attn.c_proj", ours + "attn.proj", d, d);
    add_layernorm(out, hf + "ln_2", ours + "ln2", d);
    add_conv1d(out, hf + "mlp.c_fc", ours + "mlp.fc", d, m.ffn);
    add_conv1d(out, hf + "mlp.c_proj", ours + "mlp.proj", m.ffn, d);
  }
  add_layernorm(out, "transformer.ln_f", "final_norm", d);
  if (!m.tied) add(out, "lm_head.weight", {m.vocab_size, d}, "head.weight", {m.vocab_size, d});
  return out;
}

// The config.json keys GPT2LMHeadModel reads that hf_config.cpp's common list does not hold. The summary_*
// keys configure GPT2DoubleHeadsModel's classification head, which a causal LM does not have.
constexpr std::array<std::string_view, 23> kGpt2Keys = {
    "vocab_size",          "n_embd",           "n_layer",           "n_head",
    "n_positions",         "n_ctx",            "n_inner",           "tie_word_embeddings",
    "activation_function", "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
    "add_cross_attention", "reorder_and_upcast_attn", "resid_pdrop",  "embd_pdrop",
    "attn_pdrop",          "summary_type",     "summary_use_proj",  "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "n_special"};

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
  k.require("n_special", k.number_or("n_special", 0.0), 0.0, "no extra special-token rows");
  // reorder_and_upcast_attn only computes the scores in f32 under autocast; Cleave's f32 scores are the same.
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
    const double p = k.number_or(key, 0.1);  // GPT2Config's default
    if (p != 0.0) {
      out.notes.push_back(fmt::format("{}: {} is {}{} but Cleave trains without dropout (the key has no Cleave "
                                      "meaning; export writes it back unchanged)",
                                      k.origin(), key, p, k.find(key) == nullptr ? " (absent: GPT2Config's default)" : ""));
    }
  }
  out.model = {{"type", "gpt"},          {"vocab_size", d.vocab_size}, {"d_model", d.d_model},
               {"n_layers", d.n_layers}, {"n_heads", d.n_heads},       {"seq_len", d.seq_len},
               {"d_ff", d.ffn},          {"tie_embeddings", d.tied}};
  return out;
}

void gpt2_model_dims(const Keys& k, ModelDims& d) {
  d.n_kv_heads = d.n_heads;
  d.ffn = k.size("d_ff");
}

bool gpt2_holds(const ModelDims&, const json&) { return true; }

void gpt2_write_config(const ModelDims& d, const json&, json& out) {
  out["n_embd"] = d.d_model;
  out["n_layer"] = d.n_layers;
  out["n_head"] = d.n_heads;
  out["n_positions"] = d.seq_len;
  out["n_ctx"] = d.seq_len;  // the legacy name of n_positions; a source's value must not contradict it
  out["n_inner"] = d.ffn;
  out["activation_function"] = "gelu_new";
  out["layer_norm_epsilon"] = kGptLayerNormEps;
  out["scale_attn_weights"] = true;
  out["scale_attn_by_inverse_layer_idx"] = false;
  out["resid_pdrop"] = 0.0;  // Cleave trains without dropout
  out["embd_pdrop"] = 0.0;
  out["attn_pdrop"] = 0.0;
}

// The causal mask buffers.
bool gpt2_is_buffer(std::string_view name) {
  return map_util::ends_with(name, ".attn.bias") || map_util::ends_with(name, ".attn.masked_bias");
}

// transformers' GPT2Model state dict has no "transformer." prefix; GPT2LMHeadModel's has.
std::string gpt2_canonical_name(const std::string& name) {
  if (name.rfind("transformer.", 0) == 0 || name == "lm_head.weight") return name;
  return "transformer." + name;
}

}  // namespace

HfArchitecture gpt2_architecture() {
  HfArchitecture a;
  a.architecture = Architecture::kGpt2;
  a.class_name = "GPT2LMHeadModel";
  a.model_type = "gpt2";
  a.cleave_type = "gpt";
  a.embedding = "transformer.wte.weight";
  a.keys = kGpt2Keys;
  a.read_config = read_gpt2;
  a.holds = gpt2_holds;
  a.model_dims = gpt2_model_dims;
  a.write_config = gpt2_write_config;
  a.tensor_map = gpt2_map;
  a.is_buffer = gpt2_is_buffer;
  a.canonical_name = gpt2_canonical_name;
  return a;
}

}  // namespace cleave::hf
