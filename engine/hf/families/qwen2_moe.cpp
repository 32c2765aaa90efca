// transformers' Qwen2MoeForCausalLM at the Hugging Face level: Cleave's moe family with Qwen2's attention (biases
// on q, k and v: qkv_bias, default true, as model.qkv_bias), a softmax router whose k weights are renormalised
// only under norm_topk_prob (model.normalize_top_k; default false), and a shared expert every token runs through,
// scaled per token by sigmoid(x · shared_expert_gate) (model.n_shared_experts with model.shared_expert_gate true;
// layers/moe/shared_expert_gate.hpp). Per block: mlp.gate [E, D] (the router), E SwiGLU experts
// mlp.experts.{j}.{gate,up,down}_proj (Cleave keeps them stacked), mlp.shared_expert.{gate,up,down}_proj and
// mlp.shared_expert_gate [1, D].
// Cleave's shared SwiGLU is n_shared_experts · ffn_hidden_size wide, so shared_expert_intermediate_size must be a
// positive multiple of moe_intermediate_size (it is in the published Qwen1.5-MoE and Qwen2-MoE models: 4 and 8
// times); any other value, a layer without a mixture (decoder_sparse_step other than 1, a non-empty
// mlp_only_layers: dense MLP layers are not implemented) and use_sliding_window true are refused naming the key.
// Its row of the architecture table (hf_architecture.hpp); what it shares with the other moe rows is in
// moe_like.cpp.
#include <array>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/hf/families/llama_like.hpp"
#include "engine/hf/families/moe_like.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;

// Llama's attention, norms and sizes; the biases and the window are read here.
constexpr llama_like::Variant kQwen2MoeVariant{Architecture::kQwen2Moe, false, false, false};
constexpr moe_like::ExpertNames kQwen2MoeExperts{"mlp", "gate", "gate_proj", "up_proj", "down_proj", "shared_expert",
                                         "shared_expert_gate"};

// The config.json keys Qwen2MoeForCausalLM reads that hf_config.cpp's common list does not hold.
constexpr std::array<std::string_view, 29> kQwen2MoeKeys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "rope_theta",    "rope_scaling",    "rope_parameters",   "rms_norm_eps",        "attention_dropout",
    "layer_types",   "use_sliding_window", "sliding_window", "max_window_layers",   "qkv_bias",
    "num_experts",   "num_experts_per_tok", "norm_topk_prob", "moe_intermediate_size",
    "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef",
    "output_router_logits"};

HfModelConfig read_qwen2_moe(const Keys& k) {
  k.require("use_sliding_window", k.flag_or("use_sliding_window", false), false,
            "full attention in every layer; a window from layer max_window_layers on is not implemented for the moe "
            "family");
  k.require("decoder_sparse_step", k.size_or("decoder_sparse_step", 1), std::int64_t{1},
            "a mixture of experts in every layer (dense MLP layers between them are not implemented)");
  if (const json* dense = k.find("mlp_only_layers"); dense != nullptr && !dense->is_null()) {
    CLEAVE_CHECK(dense->is_array() && dense->empty(),
                 "{}: mlp_only_layers is {}, but Cleave builds a mixture of experts in every layer (dense MLP layers "
                 "are not implemented); this checkpoint cannot be imported", k.origin(), dense->dump());
  }
  const std::int64_t f = k.size("moe_intermediate_size"), s = k.size("shared_expert_intermediate_size");
  CLEAVE_CHECK(s > 0 && s % f == 0,
               "{}: shared_expert_intermediate_size {} is not a positive multiple of moe_intermediate_size {}, but "
               "Cleave's shared SwiGLU is model.n_shared_experts x model.ffn_hidden_size wide; this checkpoint cannot "
               "be imported", k.origin(), s, f);
  // llama_like reads intermediate_size as the MLP width; the experts are moe_intermediate_size wide.
  json with_expert_width = k.doc();
  with_expert_width["intermediate_size"] = f;
  const Keys kk(with_expert_width, k.origin());
  HfModelConfig out = llama_like::read(kk, kQwen2MoeVariant);
  out.dims.qkv_bias = k.flag_or("qkv_bias", true);  // Qwen2MoeConfig's default (transformers 4: always biased)
  moe_like::Routing routing = moe_like::read_qwen_routing(k, "num_experts");
  routing.n_shared_experts = s / f;
  routing.shared_expert_gate = true;
  moe_like::to_moe_section(k, "num_experts", routing, out);
  return out;
}

bool qwen2_moe_holds(const ModelDims& d, const json& model) {
  return d.n_shared_experts > 0 && d.shared_expert_gate && !d.qk_norm &&
         model.value("sliding_window", std::int64_t{0}) == 0;
}

void qwen2_moe_write_config(const ModelDims& d, const json& model, json& out) {
  llama_like::write(kQwen2MoeVariant, d, model, out);
  moe_like::write_qwen_moe_keys(d, model, out);
  out["qkv_bias"] = d.qkv_bias;
  out["shared_expert_intermediate_size"] = d.n_shared_experts * d.ffn;
  out["use_sliding_window"] = false;
}

std::vector<TensorMap> qwen2_moe_map(const ModelDims& m) { return moe_like::tensor_map(m, kQwen2MoeExperts); }

}  // namespace

HfArchitecture qwen2_moe_architecture() {
  HfArchitecture a = moe_like::architecture(Architecture::kQwen2Moe, "Qwen2MoeForCausalLM", "qwen2_moe",
                                            " (with a gated shared expert)");
  a.keys = kQwen2MoeKeys;
  a.read_config = read_qwen2_moe;
  a.holds = qwen2_moe_holds;
  a.write_config = qwen2_moe_write_config;
  a.tensor_map = qwen2_moe_map;
  return a;
}

}  // namespace cleave::hf
