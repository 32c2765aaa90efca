// The llama family at the Hugging Face level: transformers' LlamaForCausalLM (hf_layout.hpp lists its names,
// hf_config.hpp its config.json keys). Its row of the architecture table (hf_architecture.hpp).
#include <fmt/format.h>

#include "engine/hf/families/map_util.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using map_util::add;
using nlohmann::json;

std::vector<TensorMap> llama_map(const ModelDims& m) {
  const std::int64_t d = m.d_model, f = m.ffn;
  const std::int64_t hd = d / m.n_heads;
  const std::int64_t q = m.n_heads * hd, kv = m.n_kv_heads * hd;
  std::vector<TensorMap> out;
  add(out, "model.embed_tokens.weight", {m.vocab_size, d}, "embed.token", {m.vocab_size, d});
  for (std::int64_t i = 0; i < m.n_layers; ++i) {
    const std::string hf = fmt::format("model.layers.{}.", i);
    const std::string ours = fmt::format("blocks.{}.", i);
    add(out, hf + "input_layernorm.weight", {d}, ours + "attn_norm.weight", {d});
    add(out, hf + "self_attn.q_proj.weight", {q, d}, ours + "attn.q.weight", {q, d});
    add(out, hf + "self_attn.k_proj.weight", {kv, d}, ours + "attn.k.weight", {kv, d});
    add(out, hf + "self_attn.v_proj.weight", {kv, d}, ours + "attn.v.weight", {kv, d});
    add(out, hf + "self_attn.o_proj.weight", {d, q}, ours + "attn.o.weight", {d, q});
    add(out, hf + "post_attention_layernorm.weight", {d}, ours + "mlp_norm.weight", {d});
    add(out, hf + "mlp.gate_proj.weight", {f, d}, ours + "mlp.gate.weight", {f, d});
    add(out, hf + "mlp.up_proj.weight", {f, d}, ours + "mlp.up.weight", {f, d});
    add(out, hf + "mlp.down_proj.weight", {d, f}, ours + "mlp.down.weight", {d, f});
  }
  add(out, "model.norm.weight", {d}, "final_norm.weight", {d});
  if (!m.tied) add(out, "lm_head.weight", {m.vocab_size, d}, "head.weight", {m.vocab_size, d});
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

void llama_model_dims(const Keys& k, ModelDims& d) {
  d.n_kv_heads = k.size("n_kv_heads");
  d.ffn = k.size("ffn_hidden_size");
}

void llama_write_config(const ModelDims& d, const json& model, json& out) {
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

// The rotary frequencies buffer.
bool llama_is_buffer(std::string_view name) { return map_util::ends_with(name, ".rotary_emb.inv_freq"); }

std::string llama_canonical_name(const std::string& name) { return name; }

}  // namespace

HfArchitecture llama_architecture() {
  HfArchitecture a;
  a.architecture = Architecture::kLlama;
  a.class_name = "LlamaForCausalLM";
  a.model_type = "llama";
  a.cleave_type = "llama";
  a.embedding = "model.embed_tokens.weight";
  a.read_config = read_llama;
  a.model_dims = llama_model_dims;
  a.write_config = llama_write_config;
  a.tensor_map = llama_map;
  a.is_buffer = llama_is_buffer;
  a.canonical_name = llama_canonical_name;
  return a;
}

}  // namespace cleave::hf
