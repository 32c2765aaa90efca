// This tp rank's parts of the transformer composites: column- and row-parallel projections, checked
// against the tp size before anything is allocated.
#include "layers/parallel/parallel_transformer_block.hpp"

#include "layers/layernorm.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/row_parallel_linear.hpp"
#include "layers/parallel/tp_layout.hpp"

namespace cleave::layers {

std::unique_ptr<CausalSelfAttention> make_parallel_attention(const std::string& prefix, std::int64_t d_model,
                                                             std::int64_t n_heads, const ParamInit& init,
                                                             const ParamInit& proj_init, int tp_size, int tp_rank) {
  check_attention_heads(prefix, d_model, n_heads);
  check_tp_heads(n_heads, tp_size);
  auto qkv = std::make_unique<ColumnParallelLinear>(prefix + ".qkv", d_model, 3 * d_model, true, init, tp_size,
                                                    tp_rank, /*groups=*/3);
  auto proj = std::make_unique<RowParallelLinear>(prefix + ".proj", d_model, d_model, true, proj_init, tp_size,
                                                  tp_rank);
  return std::make_unique<CausalSelfAttention>(prefix, d_model, n_heads, n_heads / tp_size, std::move(qkv),
                                               std::move(proj), /*tensor_parallel=*/true);
}

std::unique_ptr<Mlp> make_parallel_mlp(const std::string& prefix, std::int64_t d_model, std::int64_t d_ff,
                                       const ParamInit& init, const ParamInit& proj_init, int tp_size, int tp_rank) {
  check_tp_d_ff(d_ff, tp_size);
  auto fc = std::make_unique<ColumnParallelLinear>(prefix + ".fc", d_model, d_ff, true, init, tp_size, tp_rank);
  auto proj = std::make_unique<RowParallelLinear>(prefix + ".proj", d_ff, d_model, true, proj_init, tp_size, tp_rank);
  return std::make_unique<Mlp>(prefix, std::move(fc), std::move(proj), /*tensor_parallel=*/true);
}

std::unique_ptr<TransformerBlock> make_parallel_transformer_block(const std::string& prefix, std::int64_t d_model,
                                                                  std::int64_t n_heads, std::int64_t d_ff,
                                                                  std::int64_t n_layers, const ParamInit& init,
                                                                  int tp_size, int tp_rank) {
  check_tp_heads(n_heads, tp_size, d_ff);
  check_tp_d_ff(d_ff, tp_size, n_heads);
  // Built in the one-rank constructor's order, so errors and allocations come in the same order.
  auto ln1 = std::make_unique<LayerNorm>(prefix + ".ln1", d_model, init);
  auto attn = make_parallel_attention(prefix + ".attn", d_model, n_heads, init, residual_proj_init(init, n_layers),
                                      tp_size, tp_rank);
  auto ln2 = std::make_unique<LayerNorm>(prefix + ".ln2", d_model, init);
  auto mlp = make_parallel_mlp(prefix + ".mlp", d_model, d_ff, init, residual_proj_init(init, n_layers), tp_size,
                               tp_rank);
  return std::make_unique<TransformerBlock>(prefix, std::move(ln1), std::move(attn), std::move(ln2), std::move(mlp),
                                            /*tensor_parallel=*/true);
}

}  // namespace cleave::layers
