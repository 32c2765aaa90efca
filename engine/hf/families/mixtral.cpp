// The moe family at the Hugging Face level: transformers' MixtralForCausalLM (hf_layout.hpp lists its names,
// hf_config.hpp its config.json keys). Its row of the architecture table (hf_architecture.hpp).
//
// Mixtral is Cleave's moe block with a softmax router whose k weights are renormalised, no shared experts and
// no router bias: the Llama attention, norms, embedding and head (llama.cpp's keys and checks), and per block a
// router [E, D] and E SwiGLU experts stored one tensor per expert (w1 gate, w3 up, w2 down), which Cleave keeps
// stacked ([E, F, D], [E, F, D], [E, D, F]). Anything Cleave computes differently is refused naming the key:
// router_jitter_noise (training noise), a sliding window, and on export a moe section with another router,
// shared experts or no renormalisation. What it shares with Qwen3MoeForCausalLM is in moe_like.cpp.
#include <array>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/hf/families/llama_like.hpp"
#include "engine/hf/families/moe_like.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;

// Llama's attention, norms and sizes (llama_like.cpp) with neither a window nor biases; sliding_window is read here.
constexpr llama_like::Variant kMixtralVariant{Architecture::kMixtral, false, false};

// The config.json keys MixtralForCausalLM reads that hf_config.cpp's common list does not hold.
constexpr std::array<std::string_view, 23> kMixtralKeys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "rope_theta",    "rope_scaling",    "rope_parameters",   "rms_norm_eps",        "attention_dropout",
    "layer_types",   "sliding_window",  "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
    "router_z_loss_coef", "router_jitter_noise", "output_router_logits"};

constexpr moe_like::ExpertNames kMixtralExperts{"block_sparse_moe", "gate", "w1", "w3", "w2"};

std::vector<TensorMap> mixtral_map(const ModelDims& m) { return moe_like::tensor_map(m, kMixtralExperts); }

HfModelConfig read_mixtral(const Keys& k) {
  // The attention, norms and sizes are Llama's (intermediate_size: each expert's width).
  HfModelConfig out = llama_like::read(k, kMixtralVariant);
  k.require("router_jitter_noise", k.number_or("router_jitter_noise", 0.0), 0.0,
            "no router jitter (Cleave's router does not perturb its input)");
  const std::int64_t max_positions = out.dims.seq_len;
  CLEAVE_CHECK(k.find("sliding_window") == nullptr || k.size("sliding_window") >= max_positions,
               "{}: sliding_window is {}, but Cleave's attention is full causal over max_position_embeddings {}; this "
               "checkpoint cannot be imported", k.origin(), k.find("sliding_window")->dump(), max_positions);
  moe_like::Routing routing;
  routing.n_experts = k.size("num_local_experts");
  routing.top_k = k.size("num_experts_per_tok");
  routing.normalize_top_k = true;  // Mixtral always renormalises
  routing.aux_loss_coef = k.number_or("router_aux_loss_coef", 0.001);
  routing.z_loss_coef = k.number_or("router_z_loss_coef", 0.0);
  moe_like::to_moe_section(k, "num_local_experts", routing, out);
  out.model["norm_eps"] = k.number_or("rms_norm_eps", 1e-5);  // Mixtral's default
  if (k.find("rope_theta") == nullptr && k.find("rope_parameters") == nullptr && k.find("rope_scaling") == nullptr)
    out.model["rope_theta"] = 1e6;  // Mixtral's default
  return out;
}

// Mixtral holds a moe model without q/k norms (moe_like::model_dims refused what neither moe class holds).
bool mixtral_holds(const ModelDims& d, const json& model) {
  return !d.qkv_bias && !d.qk_norm && d.n_shared_experts == 0 && model.value("sliding_window", std::int64_t{0}) == 0;
}

void mixtral_write_config(const ModelDims& d, const json& model, json& out) {
  llama_like::write(kMixtralVariant, d, model, out);  // kMixtral: no attention_bias / mlp_bias (not Mixtral keys)
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
  HfArchitecture a = moe_like::architecture(Architecture::kMixtral, "MixtralForCausalLM", "mixtral");
  a.keys = kMixtralKeys;
  a.read_config = read_mixtral;
  a.holds = mixtral_holds;
  a.write_config = mixtral_write_config;
  a.tensor_map = mixtral_map;
  return a;
}

}  // namespace cleave::hf
