// transformers' Qwen3MoeForCausalLM at the Hugging Face level: Cleave's moe family with Qwen3's attention (the
// per-head q/k norms, model.qk_norm) and a softmax router whose k weights are renormalised only under
// norm_topk_prob (model.normalize_top_k). Per block: mlp.gate [E, D] (the router) and E SwiGLU experts
// mlp.experts.{j}.{gate,up,down}_proj, which Cleave keeps stacked. moe_intermediate_size is each expert's width
// (model.ffn_hidden_size); intermediate_size is the width of dense MLP layers, which Cleave does not build: every
// layer must be sparse (decoder_sparse_step 1, mlp_only_layers empty), else the checkpoint is refused naming the
// key. attention_bias and use_sliding_window must be false. The expert count is num_experts (transformers 5 writes
// it as num_local_experts). What it shares with MixtralForCausalLM is in moe_like.cpp. Its row of the
// architecture table (hf_architecture.hpp).
#include <array>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/hf/families/llama_like.hpp"
#include "engine/hf/families/moe_like.hpp"
#include "engine/hf/hf_architecture.hpp"

namespace cleave::hf {
namespace {

using nlohmann::json;

constexpr llama_like::Variant kQwen3MoeVariant{Architecture::kQwen3Moe, false, false, true};
constexpr moe_like::ExpertNames kQwen3MoeExperts{"mlp", "gate", "gate_proj", "up_proj", "down_proj"};

// The config.json keys Qwen3MoeForCausalLM reads that hf_config.cpp's common list does not hold.
constexpr std::array<std::string_view, 29> kQwen3MoeKeys = {
    "vocab_size",    "hidden_size",     "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "hidden_act",
    "rope_theta",    "rope_scaling",    "rope_parameters",   "rms_norm_eps",        "attention_dropout",
    "layer_types",   "use_sliding_window", "sliding_window", "max_window_layers",   "attention_bias",
    "num_experts",   "num_local_experts", "num_experts_per_tok", "norm_topk_prob",  "moe_intermediate_size",
    "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef", "output_router_logits"};

const char* experts_key(const Keys& k) { return k.find("num_experts") != nullptr ? "num_experts" : "num_local_experts"; }

HfModelConfig read_qwen3_moe(const Keys& k) {
  const char* experts = experts_key(k);
  CLEAVE_CHECK(k.find("num_experts") == nullptr || k.find("num_local_experts") == nullptr ||
                   k.size("num_experts") == k.size("num_local_experts"),
               "{}: num_experts {} and num_local_experts {} differ (transformers reads one as the other)", k.origin(),
               k.size("num_experts"), k.size("num_local_experts"));
  k.require("decoder_sparse_step", k.size_or("decoder_sparse_step", 1), std::int64_t{1},
            "a mixture of experts in every layer (dense MLP layers between them are not implemented)");
  if (const json* dense = k.find("mlp_only_layers"); dense != nullptr) {
    CLEAVE_CHECK(dense->is_array() && dense->empty(),
                 "{}: mlp_only_layers is {}, but Cleave builds a mixture of experts in every layer (dense MLP layers "
                 "are not implemented); this checkpoint cannot be imported", k.origin(), dense->dump());
  }
  // llama_like reads intermediate_size as the MLP width; a Qwen3-MoE's experts are moe_intermediate_size wide.
  json with_expert_width = k.doc();
  with_expert_width["intermediate_size"] = k.size("moe_intermediate_size");
  const Keys kk(with_expert_width, k.origin());
  HfModelConfig out = llama_like::read(kk, kQwen3MoeVariant);
  const moe_like::Routing routing = moe_like::read_qwen_routing(k, experts);
  moe_like::to_moe_section(k, experts, routing, out);
  return out;
}

bool qwen3_moe_holds(const ModelDims& d, const json& model) {
  return d.qk_norm && !d.qkv_bias && d.n_shared_experts == 0 && model.value("sliding_window", std::int64_t{0}) == 0;
}

void qwen3_moe_write_config(const ModelDims& d, const json& model, json& out) {
  llama_like::write(kQwen3MoeVariant, d, model, out);
  moe_like::write_qwen_moe_keys(d, model, out);
}

std::vector<TensorMap> qwen3_moe_map(const ModelDims& m) { return moe_like::tensor_map(m, kQwen3MoeExperts); }

}  // namespace

HfArchitecture qwen3_moe_architecture() {
  HfArchitecture a =
      moe_like::architecture(Architecture::kQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe", " (with q/k norms)");
  a.keys = kQwen3MoeKeys;
  a.read_config = read_qwen3_moe;
  a.holds = qwen3_moe_holds;
  a.write_config = qwen3_moe_write_config;
  a.tensor_map = qwen3_moe_map;
  return a;
}

}  // namespace cleave::hf
