// The moe block's parts for any tp size, wired by TransformerBlock (see moe_block.hpp).
#include "layers/moe/moe_block.hpp"

#include "layers/llama/llama_block.hpp"
#include "layers/llama/rmsnorm.hpp"
#include "layers/llama/swiglu_mlp.hpp"
#include "layers/moe/moe_mlp.hpp"
#include "layers/moe/shared_expert_gate.hpp"

namespace cleave::layers {
std::unique_ptr<TransformerBlock> make_moe_block(const partition::BlockSpec& b, const partition::MoeConfig& config,
                                                 const ParamInit& init, int tp_size, int tp_rank, int ep_size,
                                                 int ep_rank) {
  CLEAVE_ASSERT(b.kind == partition::BlockKind::kMoeBlock && tp_size >= 1 && b.n_heads % tp_size == 0 &&
                    b.n_kv_heads % tp_size == 0 && b.d_ff % tp_size == 0,
                "make_moe_block: block '{}' ({} heads, {} kv heads, expert ffn {}) cannot split over tp {}", b.name,
                b.n_heads, b.n_kv_heads, b.d_ff, tp_size);
  const std::int64_t d = b.in_features, f = b.d_ff;
  const bool tp = tp_size > 1;
  const std::string& p = b.name;
  const float eps = static_cast<float>(b.norm_eps);
  auto attn_norm = std::make_unique<RmsNorm>(p + ".attn_norm", d, eps, init);
  auto attn = make_llama_attention(b, init, tp_size, tp_rank);  // llama's (q/k norms where b.qk_norm: Qwen3-MoE)
  auto mlp_norm = std::make_unique<RmsNorm>(p + ".mlp_norm", d, eps, init);
  RouterOptions router;
  router.kind = config.router;
  router.experts = b.n_experts;
  router.top_k = b.top_k;
  router.normalize = config.normalize_top_k;
  router.aux_coef = config.aux_loss_coef;
  router.z_coef = config.z_loss_coef;
  router.bias_update_rate = router.kind == partition::RouterKind::kSigmoid ? config.bias_update_rate : 0.0;
  router.forced = partition::forced_routing(config.forced_routing, b.n_experts, b.top_k);
  const std::string m = p + ".moe";
  LayerPtr shared;
  if (b.n_shared_experts > 0) {
    shared = make_swiglu_mlp(m + ".shared", d, b.n_shared_experts * f, init, tp_size, tp_rank);
    if (b.shared_expert_gate) shared = std::make_unique<SharedExpertGate>(m + ".shared_gate", d, std::move(shared), init);
  }
  auto moe = std::make_unique<MoeMlp>(m, d, f, router, std::move(shared), init, tp_size, tp_rank, ep_size, ep_rank);
  return std::make_unique<TransformerBlock>(p, std::move(attn_norm), std::move(attn), std::move(mlp_norm),
                                            std::move(moe), tp, TransformerBlock::Family::kLlama);
}

}  // namespace cleave::layers
