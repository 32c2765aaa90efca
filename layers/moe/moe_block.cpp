// The moe block's parts for any tp size, wired by TransformerBlock (see moe_block.hpp).
#include "layers/moe/moe_block.hpp"

#include "layers/linear.hpp"
#include "layers/llama/llama_block.hpp"
#include "layers/llama/rmsnorm.hpp"
#include "layers/llama/swiglu_mlp.hpp"
#include "layers/moe/moe_mlp.hpp"
#include "layers/moe/shared_expert_gate.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/row_parallel_linear.hpp"

namespace cleave::layers {
namespace {

// A projection without bias: a Linear on one rank, else this tp rank's column- or row-parallel shard.
enum class Split { kColumns, kRows };
LayerPtr projection(const std::string& name, std::int64_t in, std::int64_t out, Split split, const ParamInit& init,
                    int tp_size, int tp_rank) {
  if (tp_size == 1) return std::make_unique<Linear>(name, in, out, false, init);
  if (split == Split::kColumns) {
    return std::make_unique<ColumnParallelLinear>(name, in, out, false, init, tp_size, tp_rank);
  }
  return std::make_unique<RowParallelLinear>(name, in, out, false, init, tp_size, tp_rank);
}

}  // namespace

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
    const std::int64_t s = b.n_shared_experts * f;
    auto gate = projection(m + ".shared.gate", d, s, Split::kColumns, init, tp_size, tp_rank);
    auto up = projection(m + ".shared.up", d, s, Split::kColumns, init, tp_size, tp_rank);
    auto down = projection(m + ".shared.down", s, d, Split::kRows, init, tp_size, tp_rank);
    shared = std::make_unique<SwigluMlp>(m + ".shared", std::move(gate), std::move(up), std::move(down), tp);
    if (b.shared_expert_gate) shared = std::make_unique<SharedExpertGate>(m + ".shared_gate", d, std::move(shared), init);
  }
  auto moe = std::make_unique<MoeMlp>(m, d, f, router, std::move(shared), init, tp_size, tp_rank, ep_size, ep_rank);
  return std::make_unique<TransformerBlock>(p, std::move(attn_norm), std::move(attn), std::move(mlp_norm),
                                            std::move(moe), tp, TransformerBlock::Family::kLlama);
}

}  // namespace cleave::layers
