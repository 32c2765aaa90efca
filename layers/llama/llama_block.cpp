// The Llama block's parts for any tp size, wired by TransformerBlock (the residual stream around them).
#include "layers/llama/llama_block.hpp"

#include "layers/llama/head_rmsnorm.hpp"
#include "layers/llama/llama_attention.hpp"
#include "layers/llama/rmsnorm.hpp"
#include "layers/llama/swiglu_mlp.hpp"
#include "layers/parallel/tp_projection.hpp"

namespace cleave::layers {

LayerPtr make_llama_attention(const partition::BlockSpec& b, const ParamInit& init, int tp_size, int tp_rank) {
  const std::int64_t d = b.in_features, hd = d / b.n_heads;
  const std::string p = b.name + ".attn";
  auto q = tp_projection(p + ".q", d, b.n_heads * hd, TpSplit::kColumns, init, tp_size, tp_rank, b.qkv_bias);
  auto k = tp_projection(p + ".k", d, b.n_kv_heads * hd, TpSplit::kColumns, init, tp_size, tp_rank, b.qkv_bias);
  auto v = tp_projection(p + ".v", d, b.n_kv_heads * hd, TpSplit::kColumns, init, tp_size, tp_rank, b.qkv_bias);
  auto o = tp_projection(p + ".o", b.n_heads * hd, d, TpSplit::kRows, init, tp_size, tp_rank);
  QkNorms norms;
  if (b.qk_norm) {
    const float eps = static_cast<float>(b.norm_eps);
    norms.q = std::make_unique<HeadRmsNorm>(p + ".q_norm", hd, eps, init, tp_size, tp_rank);
    norms.k = std::make_unique<HeadRmsNorm>(p + ".k_norm", hd, eps, init, tp_size, tp_rank);
  }
  LlamaHeads heads{d, b.n_heads, b.n_kv_heads, b.n_heads / tp_size, b.n_kv_heads / tp_size,
                   static_cast<float>(b.rope_theta), b.attention_window};
  return std::make_unique<LlamaAttention>(p, heads, std::move(q), std::move(k), std::move(v), std::move(o),
                                          tp_size > 1, std::move(norms));
}

std::unique_ptr<TransformerBlock> make_llama_shaped_block(const partition::BlockSpec& b, const ParamInit& init,
                                                          int tp_size, int tp_rank, std::string_view ffn,
                                                          const std::function<LayerPtr()>& make_mlp) {
  CLEAVE_ASSERT(tp_size >= 1 && b.n_heads % tp_size == 0 && b.n_kv_heads % tp_size == 0 && b.d_ff % tp_size == 0,
                "make_llama_shaped_block: block '{}' ({} heads, {} kv heads, {} {}) cannot split over tp {}", b.name,
                b.n_heads, b.n_kv_heads, ffn, b.d_ff, tp_size);
  const std::int64_t d = b.in_features;
  const std::string& p = b.name;
  const float eps = static_cast<float>(b.norm_eps);
  // Built in parameter order, so errors and allocations come in the same order on every layout.
  auto attn_norm = std::make_unique<RmsNorm>(p + ".attn_norm", d, eps, init);
  auto attn = make_llama_attention(b, init, tp_size, tp_rank);  // q/k norms where b.qk_norm (Qwen3, Qwen3-MoE)
  auto mlp_norm = std::make_unique<RmsNorm>(p + ".mlp_norm", d, eps, init);
  auto mlp = make_mlp();
  return std::make_unique<TransformerBlock>(p, std::move(attn_norm), std::move(attn), std::move(mlp_norm),
                                            std::move(mlp), tp_size > 1, TransformerBlock::Family::kLlama);
}

std::unique_ptr<TransformerBlock> make_llama_block(const partition::BlockSpec& b, const ParamInit& init, int tp_size,
                                                   int tp_rank) {
  CLEAVE_ASSERT(b.kind == partition::BlockKind::kLlamaBlock, "make_llama_block: block '{}' is not a llama block",
                b.name);
  return make_llama_shaped_block(b, init, tp_size, tp_rank, "ffn", [&] {
    return make_swiglu_mlp(b.name + ".mlp", b.in_features, b.d_ff, init, tp_size, tp_rank);
  });
}

}  // namespace cleave::layers
