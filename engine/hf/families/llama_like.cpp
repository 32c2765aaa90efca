// LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM: the keys they read, refuse and write, their
// tensor names (llama_like.hpp).
#include "engine/hf/families/llama_like.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "engine/hf/families/map_util.hpp"

namespace cleave::hf::llama_like {

using map_util::add;
using nlohmann::json;

void add_attention(std::vector<TensorMap>& out, const ModelDims& m, std::int64_t i) {
  const std::int64_t d = m.d_model, hd = d / m.n_heads;
  const std::int64_t q = m.n_heads * hd, kv = m.n_kv_heads * hd;
  const std::string hf = fmt::format("model.layers.{}.", i);
  const std::string ours = fmt::format("blocks.{}.", i);
  add(out, hf + "input_layernorm.weight", {d}, ours + "attn_norm.weight", {d});
  add(out, hf + "self_attn.q_proj.weight", {q, d}, ours + "attn.q.weight", {q, d});
  if (m.qkv_bias) add(out, hf + "self_attn.q_proj.bias", {q}, ours + "attn.q.bias", {q});
  add(out, hf + "self_attn.k_proj.weight", {kv, d}, ours + "attn.k.weight", {kv, d});
  if (m.qkv_bias) add(out, hf + "self_attn.k_proj.bias", {kv}, ours + "attn.k.bias", {kv});
  add(out, hf + "self_attn.v_proj.weight", {kv, d}, ours + "attn.v.weight", {kv, d});
  if (m.qkv_bias) add(out, hf + "self_attn.v_proj.bias", {kv}, ours + "attn.v.bias", {kv});
  add(out, hf + "self_attn.o_proj.weight", {d, q}, ours + "attn.o.weight", {d, q});
  if (m.qk_norm) {
    add(out, hf + "self_attn.q_norm.weight", {hd}, ours + "attn.q_norm.weight", {hd});
    add(out, hf + "self_attn.k_norm.weight", {hd}, ours + "attn.k_norm.weight", {hd});
  }
  add(out, hf + "post_attention_layernorm.weight", {d}, ours + "mlp_norm.weight", {d});
}

std::vector<TensorMap> tensor_map(const ModelDims& m) {
  const std::int64_t d = m.d_model, f = m.ffn;
  std::vector<TensorMap> out;
  add(out, "model.embed_tokens.weight", {m.vocab_size, d}, "embed.token", {m.vocab_size, d});
  for (std::int64_t i = 0; i < m.n_layers; ++i) {
    const std::string hf = fmt::format("model.layers.{}.", i);
    const std::string ours = fmt::format("blocks.{}.", i);
    add_attention(out, m, i);
    add(out, hf + "mlp.gate_proj.weight", {f, d}, ours + "mlp.gate.weight", {f, d});
    add(out, hf + "mlp.up_proj.weight", {f, d}, ours + "mlp.up.weight", {f, d});
    add(out, hf + "mlp.down_proj.weight", {d, f}, ours + "mlp.down.weight", {d, f});
  }
  add(out, "model.norm.weight", {d}, "final_norm.weight", {d});
  if (!m.tied) add(out, "lm_head.weight", {m.vocab_size, d}, "head.weight", {m.vocab_size, d});
  return out;
}

namespace {

// A dropout probability: Cleave trains without dropout, so a non-zero one is noted (not refused: it changes
// nothing at inference, and export writes the source's value back).
void note_dropout(const Keys& k, const std::string& key, HfModelConfig& out) {
  const double p = k.number_or(key, 0.0);
  if (p != 0.0) {
    out.notes.push_back(fmt::format("{}: {} is {} but Cleave trains without dropout (the key has no Cleave meaning; "
                                    "export writes it back unchanged)",
                                    k.origin(), key, p));
  }
}

// The model's dimensions, and the keys that must hold Cleave's Llama (head size, SiLU, no biases but Qwen2's,
// one matrix per projection).
ModelDims read_dims(const Keys& k, const Variant& v) {
  ModelDims d;
  d.architecture = v.architecture;
  d.vocab_size = k.size("vocab_size");
  d.d_model = k.size("hidden_size");
  d.n_layers = k.size("num_hidden_layers");
  d.n_heads = k.size("num_attention_heads");
  d.n_kv_heads = k.size_or("num_key_value_heads", d.n_heads);
  d.ffn = k.size("intermediate_size");
  d.seq_len = k.size("max_position_embeddings");
  d.tied = k.flag_or("tie_word_embeddings", false);
  d.qkv_bias = v.qwen2;
  d.qk_norm = v.qk_norm;
  CLEAVE_CHECK(d.d_model % d.n_heads == 0, "{}: hidden_size {} is not divisible by num_attention_heads {}", k.origin(),
               d.d_model, d.n_heads);
  CLEAVE_CHECK(d.n_heads % d.n_kv_heads == 0,
               "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", k.origin(), d.n_heads,
               d.n_kv_heads);
  k.require("head_dim", k.size_or("head_dim", d.d_model / d.n_heads), d.d_model / d.n_heads,
            "head size hidden_size / num_attention_heads");
  k.require("hidden_act", k.text_or("hidden_act", "silu"), std::string("silu"), "SwiGLU with SiLU");
  if (v.architecture == Architecture::kLlama) {
    k.require("attention_bias", k.flag_or("attention_bias", false), false, "its Llama has no attention biases");
    k.require("mlp_bias", k.flag_or("mlp_bias", false), false, "its Llama has no MLP biases");
    k.require("pretraining_tp", k.size_or("pretraining_tp", 1), std::int64_t{1}, "one matrix per projection");
  }
  if (v.qk_norm) {  // Qwen3's attention_bias puts biases on q, k, v and o
    k.require("attention_bias", k.flag_or("attention_bias", false), false, "its Qwen3 attention has no biases");
  }
  return d;
}

// RoPE's theta: transformers 4 keeps rope_theta and rope_scaling at the top level, 5 in rope_parameters; only the
// unscaled "default" RoPE is imported.
double read_rope_theta(const Keys& k, const Variant& v) {
  double theta = k.number_or("rope_theta", v.qwen2 ? 10000.0 : 10000.0);
  for (const char* section : {"rope_scaling", "rope_parameters"}) {
    const json* rope = k.find(section);
    if (rope == nullptr) continue;
    CLEAVE_CHECK(rope->is_object(), "{}: {} must be an object, got {}", k.origin(), section, rope->dump());
    const Keys r(*rope, fmt::format("{} {}", k.origin(), section));
    const std::string type = r.text_or("rope_type", r.text_or("type", "default"));
    CLEAVE_CHECK(type == "default", "{}: {}.rope_type is \"{}\", but Cleave's RoPE is the unscaled \"default\"; this "
                 "checkpoint cannot be imported", k.origin(), section, type);
    for (const auto& [key, value] : rope->items()) {
      CLEAVE_CHECK(key == "rope_type" || key == "type" || key == "rope_theta",
                   "{}: {}.{} is not a key Cleave's unscaled RoPE knows (it may change the positions); remove it if "
                   "it does not, else this checkpoint cannot be imported", k.origin(), section, key);
    }
    theta = r.number_or("rope_theta", theta);
  }
  return theta;
}

// The sliding window and the first layer it applies from (0, 0: none).
struct Window {
  std::int64_t length = 0, from_layer = 0;
};

// The window. Mistral: sliding_window (null: none, then it is exactly Llama) in every layer. Qwen2: a window
// only under use_sliding_window, from layer max_window_layers on (transformers' layer_types; none at all when
// that is past the last layer). Llama: the key does not exist, so a value there is a relabelled Mistral whose
// logits would depend on the class that reads it. Mixtral (mixtral.cpp) checks its own sliding_window.
Window read_sliding_window(const Keys& k, const Variant& v, const ModelDims& d) {
  const std::string_view cls = architecture_class(v.architecture);
  std::int64_t window = 0, window_from = 0;
  if (v.sliding_window) {
    window = k.size_or("sliding_window", 0);
  } else if (v.qwen2 && k.flag_or("use_sliding_window", false)) {
    const json* w = k.find("sliding_window");
    CLEAVE_CHECK(w != nullptr && !w->is_null(), "{}: use_sliding_window is true but sliding_window is absent or null; "
                 "give the window's length or set use_sliding_window false", k.origin());
    window = k.size("sliding_window");
    window_from = k.size_or("max_window_layers", 28);  // transformers' Qwen2Config default
    if (window_from >= d.n_layers) window = window_from = 0;  // no layer has the window
  } else if (v.qk_norm) {
    k.require("use_sliding_window", k.flag_or("use_sliding_window", false), false,
              "full attention in every layer; a window from layer max_window_layers on is not implemented for Qwen3");
  } else if (const json* w = k.find("sliding_window"); w != nullptr && v.architecture == Architecture::kLlama) {
    CLEAVE_THROW("{}: sliding_window is {}, a MistralForCausalLM key that {} ignores (a relabelled Mistral?); set "
                 "\"architectures\": [\"MistralForCausalLM\"] and \"model_type\": \"mistral\" if the model was trained "
                 "with the window, or remove sliding_window if it was not",
                 k.origin(), w->dump(), cls);
  }
  return {window, window_from};
}

// layer_types, where given, agrees with the window each layer gets.
void check_layer_types(const Keys& k, std::int64_t window, std::int64_t window_from) {
  if (const json* types = k.find("layer_types"); types != nullptr) {
    CLEAVE_CHECK(types->is_array(), "{}: layer_types must be a list, got {}", k.origin(), types->dump());
    for (std::size_t i = 0; i < types->size(); ++i) {
      const bool sliding = window > 0 && static_cast<std::int64_t>(i) >= window_from;
      const json& t = (*types)[i];
      CLEAVE_CHECK(t == (sliding ? "sliding_attention" : "full_attention"),
                   "{}: layer_types[{}] is {}, but the other keys (sliding_window, use_sliding_window, "
                   "max_window_layers) give layer {} {}; this checkpoint cannot be imported", k.origin(), i, t.dump(),
                   i, sliding ? "the sliding window" : "full attention");
    }
  }
}

}  // namespace

HfModelConfig read(const Keys& k, const Variant& v) {
  HfModelConfig out;
  out.dims = read_dims(k, v);
  const ModelDims& d = out.dims;
  const double theta = read_rope_theta(k, v);
  const Window w = read_sliding_window(k, v, d);
  const std::int64_t window = w.length, window_from = w.from_layer;
  check_layer_types(k, window, window_from);
  note_dropout(k, "attention_dropout", out);
  out.model = {{"type", "llama"},
               {"vocab_size", d.vocab_size},
               {"d_model", d.d_model},
               {"n_layers", d.n_layers},
               {"n_heads", d.n_heads},
               {"n_kv_heads", d.n_kv_heads},
               {"seq_len", import_seq_len(d.seq_len)},
               {"ffn_hidden_size", d.ffn},
               {"rope_theta", theta},
               {"norm_eps", k.number_or("rms_norm_eps", 1e-6)},
               {"tie_embeddings", d.tied},
               {"max_seq_len", d.seq_len},
               {"sliding_window", window},
               {"sliding_window_from_layer", window_from},
               {"qkv_bias", d.qkv_bias},
               {"qk_norm", d.qk_norm}};
  return out;
}

void model_dims(const Keys& k, ModelDims& d) {
  d.n_kv_heads = k.size("n_kv_heads");
  d.ffn = k.size("ffn_hidden_size");
  d.seq_len = k.size_or("max_seq_len", d.seq_len);  // max_position_embeddings, not the training length
  d.qkv_bias = k.flag_or("qkv_bias", false);
  d.qk_norm = k.flag_or("qk_norm", false);
}

void write(const Variant& v, const ModelDims& d, const json& model, json& out) {
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
  out["attention_dropout"] = 0.0;
  const std::int64_t window = model.value("sliding_window", std::int64_t{0});
  if (v.architecture == Architecture::kLlama) {
    out["attention_bias"] = false;
    out["mlp_bias"] = false;
  } else if (v.sliding_window) {
    out["sliding_window"] = window > 0 ? json(window) : json();
  } else if (v.qwen2) {
    out["use_sliding_window"] = window > 0;
    if (window > 0) {
      out["sliding_window"] = window;
      out["max_window_layers"] = model.value("sliding_window_from_layer", std::int64_t{0});
    }
  } else if (v.qk_norm) {
    out["use_sliding_window"] = false;
  }
  if (v.qk_norm) out["attention_bias"] = false;
}

bool is_buffer(std::string_view name) { return map_util::ends_with(name, ".rotary_emb.inv_freq"); }

std::string canonical_name(const std::string& name) { return name; }

HfArchitecture architecture(Architecture architecture, std::string_view class_name, std::string_view model_type,
                            std::string_view export_note) {
  HfArchitecture a;
  a.architecture = architecture;
  a.class_name = class_name;
  a.model_type = model_type;
  a.cleave_type = "llama";
  a.embedding = "model.embed_tokens.weight";
  a.export_note = export_note;
  a.model_dims = model_dims;
  a.tensor_map = tensor_map;
  a.is_buffer = is_buffer;
  a.canonical_name = canonical_name;
  return a;
}

}  // namespace cleave::hf::llama_like
