// MixtralForCausalLM's, Qwen3MoeForCausalLM's and Qwen2MoeForCausalLM's shared reading, checks and tensor names (moe_like.hpp).
#include "engine/hf/families/moe_like.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/hf/families/llama_like.hpp"
#include "engine/hf/families/map_util.hpp"

namespace cleave::hf::moe_like {

using map_util::add;
using map_util::Dims;
using nlohmann::json;

void to_moe_section(const Keys& k, const char* experts_key, const Routing& r, HfModelConfig& out) {
  ModelDims& d = out.dims;
  d.n_experts = r.n_experts;
  d.top_k = r.top_k;
  CLEAVE_CHECK(d.top_k <= d.n_experts, "{}: num_experts_per_tok {} is larger than {} {}", k.origin(), d.top_k,
               experts_key, d.n_experts);
  json& m = out.model;
  m["type"] = "moe";
  // The moe section has no window (the classes' checks refused one); seq_len and max_seq_len stay llama's:
  // min(max_position_embeddings, kImportSeqLen) and max_position_embeddings.
  m.erase("sliding_window");
  m.erase("sliding_window_from_layer");
  m["qkv_bias"] = d.qkv_bias;
  d.n_shared_experts = r.n_shared_experts;
  d.shared_expert_gate = r.shared_expert_gate;
  m["n_experts"] = d.n_experts;
  m["top_k"] = d.top_k;
  m["n_shared_experts"] = d.n_shared_experts;
  m["shared_expert_gate"] = d.shared_expert_gate;
  m["router"] = "softmax";
  m["normalize_top_k"] = r.normalize_top_k;
  m["aux_loss_coef"] = r.aux_loss_coef;
  m["z_loss_coef"] = r.z_loss_coef;  // a training loss only; written back on export
  m["forced_routing"] = "";  // the router chooses (a test and benchmark key; none in a Hugging Face model)
  m["bias_update_rate"] = 0.001;     // the sigmoid router's; unused by softmax
}

void model_dims(const Keys& k, ModelDims& d) {
  llama_like::model_dims(k, d);
  d.n_experts = k.size("n_experts");
  d.top_k = k.size("top_k");
  const std::string router = k.text_or("router", "softmax");
  CLEAVE_CHECK(router == "softmax", "{}: model.router is \"{}\", but MixtralForCausalLM, Qwen3MoeForCausalLM and "
               "Qwen2MoeForCausalLM route with a softmax; only router \"softmax\" exports", k.origin(), router);
  d.n_shared_experts = k.find("n_shared_experts") == nullptr ? 0 : k.find("n_shared_experts")->get<std::int64_t>();
  d.shared_expert_gate = k.flag_or("shared_expert_gate", false);
  const std::int64_t shared = d.n_shared_experts;
  CLEAVE_CHECK(shared == 0 || d.shared_expert_gate, "{}: model.n_shared_experts is {} with shared_expert_gate false, "
               "but the one Hugging Face class with a shared expert, Qwen2MoeForCausalLM, gates it with a sigmoid; only "
               "ungated n_shared_experts 0 or a gated shared expert (shared_expert_gate true) exports", k.origin(), shared);
  CLEAVE_CHECK(shared == 0 || !d.qk_norm, "{}: model.n_shared_experts is {} with qk_norm true, but "
               "Qwen2MoeForCausalLM (the class with a shared expert) has no q/k norms and Qwen3MoeForCausalLM no shared "
               "expert; no Hugging Face class holds both", k.origin(), shared);
  CLEAVE_CHECK(shared > 0 || !d.qkv_bias, "{}: model.qkv_bias is true without shared experts, but the one Hugging "
               "Face moe class with q/k/v biases, Qwen2MoeForCausalLM, has a gated shared expert (n_shared_experts > 0, "
               "shared_expert_gate true); MixtralForCausalLM and Qwen3MoeForCausalLM have no biases", k.origin());
  CLEAVE_CHECK(d.qk_norm || shared > 0 || k.flag_or("normalize_top_k", true), "{}: model.normalize_top_k is false, "
               "but MixtralForCausalLM always renormalises the k weights (Qwen3MoeForCausalLM's and "
               "Qwen2MoeForCausalLM's norm_topk_prob can be false, but those classes have q/k norms, model.qk_norm true, "
               "or a gated shared expert); only normalize_top_k true exports without either", k.origin());
}

Routing read_qwen_routing(const Keys& k, const char* experts_key) {
  Routing r;
  r.n_experts = k.size(experts_key);
  r.top_k = k.size("num_experts_per_tok");
  r.normalize_top_k = k.flag_or("norm_topk_prob", false);  // the configs' default
  r.aux_loss_coef = k.number_or("router_aux_loss_coef", 0.001);
  return r;
}

void write_qwen_moe_keys(const ModelDims& d, const nlohmann::json& model, nlohmann::json& out) {
  out["moe_intermediate_size"] = d.ffn;
  out["intermediate_size"] = d.ffn;  // dense layers' width; there are none (mlp_only_layers empty)
  out["num_experts"] = d.n_experts;
  out["num_experts_per_tok"] = d.top_k;
  out["norm_topk_prob"] = model.value("normalize_top_k", true);
  out["decoder_sparse_step"] = 1;
  out["mlp_only_layers"] = nlohmann::json::array();
  out["router_aux_loss_coef"] = model.value("aux_loss_coef", 0.001);
  out["output_router_logits"] = false;
  out["sliding_window"] = nullptr;
}

std::vector<TensorMap> tensor_map(const ModelDims& m, const ExpertNames& names) {
  const std::int64_t d = m.d_model, f = m.ffn, e = m.n_experts;
  std::vector<TensorMap> out;
  add(out, "model.embed_tokens.weight", {m.vocab_size, d}, "embed.token", {m.vocab_size, d});
  for (std::int64_t i = 0; i < m.n_layers; ++i) {
    llama_like::add_attention(out, m, i);
    const std::string hf = fmt::format("model.layers.{}.{}.", i, names.block);
    const std::string ours = fmt::format("blocks.{}.", i);
    add(out, hf + names.router + ".weight", {e, d}, ours + "moe.router.weight", {e, d});
    // Each stacked tensor's E rows consecutively (export fetches it once).
    const struct {
      const char* hf;
      const char* ours;
      bool down;
    } experts[] = {{names.gate, "gate", false}, {names.up, "up", false}, {names.down, "down", true}};
    for (const auto& x : experts) {
      for (std::int64_t j = 0; j < e; ++j) {
        const Dims one = x.down ? Dims{d, f} : Dims{f, d};
        const Dims all = x.down ? Dims{e, d, f} : Dims{e, f, d};
        add(out, fmt::format("{}experts.{}.{}.weight", hf, j, x.hf), one,
            fmt::format("{}moe.experts.{}.weight", ours, x.ours), all);
        out.back().slice = j;
      }
    }
    if (m.n_shared_experts > 0) {
      CLEAVE_ASSERT(names.shared != nullptr && names.shared_gate != nullptr && m.shared_expert_gate,
                    "moe tensor_map: {} has no gated shared expert", names.block);
      const std::int64_t s = m.n_shared_experts * f;
      const std::string sh = hf + names.shared + ".";
      add(out, sh + "gate_proj.weight", {s, d}, ours + "moe.shared.gate.weight", {s, d});
      add(out, sh + "up_proj.weight", {s, d}, ours + "moe.shared.up.weight", {s, d});
      add(out, sh + "down_proj.weight", {d, s}, ours + "moe.shared.down.weight", {d, s});
      add(out, hf + names.shared_gate + ".weight", {1, d}, ours + "moe.shared_gate.weight", {1, d});
    }
  }
  add(out, "model.norm.weight", {d}, "final_norm.weight", {d});
  if (!m.tied) add(out, "lm_head.weight", {m.vocab_size, d}, "head.weight", {m.vocab_size, d});
  return out;
}

HfArchitecture architecture(Architecture architecture, std::string_view class_name, std::string_view model_type,
                            std::string_view export_note) {
  HfArchitecture a = llama_like::architecture(architecture, class_name, model_type, export_note);
  a.cleave_type = "moe";
  a.model_dims = model_dims;
  a.tensor_map = nullptr;  // the class's own: tensor_map with its ExpertNames
  return a;
}

}  // namespace cleave::hf::moe_like
