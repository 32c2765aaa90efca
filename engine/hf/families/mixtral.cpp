// The moe family at the Hugging Face level: transformers' MixtralForCausalLM (hf_layout.hpp lists its names,
// hf_config.hpp its config.json keys). Its row of the architecture table (hf_architecture.hpp).
//
// Mixtral is Cleave's moe block with a softmax router whose k weights are renormalised, no shared experts and
// no router bias: the Llama attention, norms, embedding and head (llama.cpp's keys and checks), and per block a
// router [E, D] and E SwiGLU experts stored one tensor per expert (w1 gate, w3 up, w2 down), which Cleave keeps
// stacked ([E, F, D], [E, F, D], [E, D, F]). Anything Cleave computes differently is refused naming the key:
// router_jitter_noise (training noise), a sliding window, and on export a moe section with another router,
// shared experts or no renormalisation.
#include <array>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/hf/families/llama_like.hpp"
#include "engine/hf/families/map_util.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using map_util::add;
using map_util::Dims;
using nlohmann::json;

// Llama's attention, norms and sizes (llama_like.cpp) with neither a window nor biases; sliding_window is read here.
constexpr llama_like::Variant kVariant{Architecture::kMixtral, false, false};

// The config.json keys MixtralForCausalLM reads that hf_config.cpp's common list does not hold.
constexpr std::array<std::string_view, 23> kKeys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "rope_theta",    "rope_scaling",    "rope_parameters",   "rms_norm_eps",        "attention_dropout",
    "layer_types",   "sliding_window",  "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
    "router_z_loss_coef", "router_jitter_noise", "output_router_logits"};

std::vector<TensorMap> mixtral_map(const ModelDims& m) {
  const std::int64_t d = m.d_model, f = m.ffn, e = m.n_experts;
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
    add(out, hf + "block_sparse_moe.gate.weight", {e, d}, ours + "moe.router.weight", {e, d});
    // Each stacked tensor's E rows consecutively (export fetches it once).
    const struct {
      const char* hf;
      const char* ours;
      bool down;
    } experts[] = {{"w1", "gate", false}, {"w3", "up", false}, {"w2", "down", true}};
    for (const auto& x : experts) {
      for (std::int64_t j = 0; j < e; ++j) {
        const Dims one = x.down ? Dims{d, f} : Dims{f, d};
        const Dims all = x.down ? Dims{e, d, f} : Dims{e, f, d};
        add(out, fmt::format("{}block_sparse_moe.experts.{}.{}.weight", hf, j, x.hf), one,
            fmt::format("{}moe.experts.{}.weight", ours, x.ours), all);
        out.back().slice = j;
      }
    }
  }
  add(out, "model.norm.weight", {d}, "final_norm.weight", {d});
  if (!m.tied) add(out, "lm_head.weight", {m.vocab_size, d}, "head.weight", {m.vocab_size, d});
  return out;
}

HfModelConfig read_mixtral(const Keys& k) {
  // The attention, norms and sizes are Llama's (intermediate_size: each expert's width).
  HfModelConfig out = llama_like::read(k, kVariant);
  ModelDims& d = out.dims;
  d.n_experts = k.size("num_local_experts");
  d.top_k = k.size("num_experts_per_tok");
  CLEAVE_CHECK(d.top_k <= d.n_experts, "{}: num_experts_per_tok {} is larger than num_local_experts {}", k.origin(),
               d.top_k, d.n_experts);
  k.require("router_jitter_noise", k.number_or("router_jitter_noise", 0.0), 0.0,
            "no router jitter (Cleave's router does not perturb its input)");
  CLEAVE_CHECK(k.find("sliding_window") == nullptr || k.size("sliding_window") >= d.seq_len,
               "{}: sliding_window is {}, but Cleave's attention is full causal over max_position_embeddings {}; this "
               "checkpoint cannot be imported", k.origin(), k.find("sliding_window")->dump(), d.seq_len);
  json& m = out.model;
  m["type"] = "moe";
  // The moe section has no max_seq_len, window or biases: it trains at max_position_embeddings.
  m["seq_len"] = d.seq_len;
  m.erase("max_seq_len");
  m.erase("sliding_window");
  m.erase("sliding_window_from_layer");
  m.erase("qkv_bias");
  m["norm_eps"] = k.number_or("rms_norm_eps", 1e-5);  // Mixtral's default
  if (k.find("rope_theta") == nullptr && k.find("rope_parameters") == nullptr && k.find("rope_scaling") == nullptr)
    m["rope_theta"] = 1e6;  // Mixtral's default
  m["n_experts"] = d.n_experts;
  m["top_k"] = d.top_k;
  m["n_shared_experts"] = 0;
  m["router"] = "softmax";
  m["normalize_top_k"] = true;
  m["aux_loss_coef"] = k.number_or("router_aux_loss_coef", 0.001);
  m["z_loss_coef"] = k.number_or("router_z_loss_coef", 0.0);  // a training loss only; written back on export
  m["bias_update_rate"] = 0.001;                              // the sigmoid router's; unused by softmax
  return out;
}

void mixtral_model_dims(const Keys& k, ModelDims& d) {
  llama_like::model_dims(k, d);
  d.n_experts = k.size("n_experts");
  d.top_k = k.size("top_k");
  const std::string router = k.text_or("router", "softmax");
  CLEAVE_CHECK(router == "softmax", "{}: model.router is \"{}\", but MixtralForCausalLM routes with a softmax; only "
               "router \"softmax\" exports", k.origin(), router);
  CLEAVE_CHECK(k.flag_or("normalize_top_k", true), "{}: model.normalize_top_k is false, but MixtralForCausalLM always "
               "renormalises the k weights; only normalize_top_k true exports", k.origin());
  const std::int64_t shared = k.find("n_shared_experts") == nullptr ? 0 : k.find("n_shared_experts")->get<std::int64_t>();
  CLEAVE_CHECK(shared == 0, "{}: model.n_shared_experts is {}, but MixtralForCausalLM has no shared experts; only "
               "n_shared_experts 0 exports", k.origin(), shared);
}

// The moe family has neither a window nor q/k/v biases: Mixtral holds every moe model that model_dims accepts.
bool mixtral_holds(const ModelDims& d, const json& model) {
  return !d.qkv_bias && model.value("sliding_window", std::int64_t{0}) == 0;
}

void mixtral_write_config(const ModelDims& d, const json& model, json& out) {
  llama_like::write(kVariant, d, model, out);  // kMixtral: no attention_bias / mlp_bias (not Mixtral keys)
  out["num_local_experts"] = d.n_experts;
  out["num_experts_per_tok"] = d.top_k;
  out["router_aux_loss_coef"] = model.value("aux_loss_coef", 0.001);
  out["router_z_loss_coef"] = model.value("z_loss_coef", 0.0);
  out["router_jitter_noise"] = 0.0;
  out["output_router_logits"] = false;
  out["sliding_window"] = nullptr;
}

}  // namespace

HfArchitecture mixtral_architecture() {
  HfArchitecture a;
  a.architecture = Architecture::kMixtral;
  a.class_name = "MixtralForCausalLM";
  a.model_type = "mixtral";
  a.cleave_type = "moe";
  a.embedding = "model.embed_tokens.weight";
  a.keys = kKeys;
  a.read_config = read_mixtral;
  a.model_dims = mixtral_model_dims;
  a.holds = mixtral_holds;
  a.write_config = mixtral_write_config;
  a.tensor_map = mixtral_map;
  a.is_buffer = llama_like::is_buffer;
  a.canonical_name = llama_like::canonical_name;
  return a;
}

}  // namespace cleave::hf
