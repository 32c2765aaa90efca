// Llama block: the residual stream around attn_norm, attn, mlp_norm, mlp; and its builder for any tp size.
#include "layers/llama/llama_block.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/linear.hpp"
#include "layers/llama/llama_attention.hpp"
#include "layers/llama/rmsnorm.hpp"
#include "layers/llama/swiglu_mlp.hpp"
#include "layers/parallel/column_parallel_linear.hpp"
#include "layers/parallel/row_parallel_linear.hpp"

namespace cleave::layers {

LlamaBlock::LlamaBlock(std::string prefix, LayerPtr attn_norm, LayerPtr attn, LayerPtr mlp_norm, LayerPtr mlp,
                       bool tensor_parallel)
    : prefix_(std::move(prefix)),
      tensor_parallel_(tensor_parallel),
      attn_norm_(std::move(attn_norm)),
      attn_(std::move(attn)),
      mlp_norm_(std::move(mlp_norm)),
      mlp_(std::move(mlp)) {
  CLEAVE_ASSERT(attn_norm_ && attn_ && mlp_norm_ && mlp_, "{}: needs attn_norm, attn, mlp_norm and mlp parts", who());
}

std::string LlamaBlock::who() const { return (tensor_parallel_ ? "parallel llama block " : "llama block ") + prefix_; }

Tensor LlamaBlock::forward(const Tensor& x, Stash& stash, Context& ctx) {
  stash.clear();
  stash.children.resize(4);
  Tensor a = attn_norm_->forward(x, stash.children[0], ctx);
  Tensor x1 = attn_->forward(a, stash.children[1], ctx);
  ops::add_inplace(ctx, x1, x);  // x1 = x + attn(attn_norm(x))
  Tensor m = mlp_norm_->forward(x1, stash.children[2], ctx);
  Tensor y = mlp_->forward(m, stash.children[3], ctx);
  ops::add_inplace(ctx, y, x1);  // y = x1 + mlp(mlp_norm(x1))
  return y;
}

Tensor LlamaBlock::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 4, "{}: backward_input without forward", who());
  // dy is kept by mlp.down for its weight gradient and belongs to the caller: never written here.
  Tensor dm = mlp_->backward_input(dy, stash.children[3], ctx);
  Tensor dx1 = mlp_norm_->backward_input(dm, stash.children[2], ctx);
  ops::add_inplace(ctx, dx1, dy);  // residual path
  Tensor da = attn_->backward_input(dx1, stash.children[1], ctx);
  Tensor dx = attn_norm_->backward_input(da, stash.children[0], ctx);
  ops::add_inplace(ctx, dx, dx1);
  return dx;
}

void LlamaBlock::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 4, "{}: backward_weight without forward", who());
  attn_norm_->backward_weight(stash.children[0], ctx);
  attn_->backward_weight(stash.children[1], ctx);
  mlp_norm_->backward_weight(stash.children[2], ctx);
  mlp_->backward_weight(stash.children[3], ctx);
  stash.clear();
}

void LlamaBlock::set_selective_recompute(bool on) {
  auto* attention = dynamic_cast<LlamaAttention*>(attn_.get());
  CLEAVE_ASSERT(attention != nullptr, "{}: selective recomputation needs a LlamaAttention part", who());
  attention->set_recompute_scores(on);
}

std::vector<std::shared_ptr<Param>> LlamaBlock::params() const {
  std::vector<std::shared_ptr<Param>> out;
  for (const Layer* part : {attn_norm_.get(), attn_.get(), mlp_norm_.get(), mlp_.get()}) {
    for (auto& p : part->params()) out.push_back(p);
  }
  return out;
}

namespace {

// A projection without bias, [..., in] -> [..., out]: a Linear on one rank, else this tp rank's
// column-parallel (output features split) or row-parallel (input features split) shard.
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

std::unique_ptr<LlamaBlock> make_llama_block(const partition::BlockSpec& b, const ParamInit& init, int tp_size,
                                             int tp_rank) {
  CLEAVE_ASSERT(b.kind == partition::BlockKind::kLlamaBlock && tp_size >= 1 && b.n_heads % tp_size == 0 &&
                    b.n_kv_heads % tp_size == 0 && b.d_ff % tp_size == 0,
                "make_llama_block: block '{}' ({} heads, {} kv heads, ffn {}) cannot split over tp {}", b.name,
                b.n_heads, b.n_kv_heads, b.d_ff, tp_size);
  const std::int64_t d = b.in_features, hd = d / b.n_heads, f = b.d_ff;
  const bool tp = tp_size > 1;
  const std::string& p = b.name;
  const float eps = static_cast<float>(b.norm_eps);
  // Built in parameter order, so errors and allocations come in the same order on every layout.
  auto attn_norm = std::make_unique<RmsNorm>(p + ".attn_norm", d, eps, init);
  auto q = projection(p + ".attn.q", d, b.n_heads * hd, Split::kColumns, init, tp_size, tp_rank);
  auto k = projection(p + ".attn.k", d, b.n_kv_heads * hd, Split::kColumns, init, tp_size, tp_rank);
  auto v = projection(p + ".attn.v", d, b.n_kv_heads * hd, Split::kColumns, init, tp_size, tp_rank);
  auto o = projection(p + ".attn.o", b.n_heads * hd, d, Split::kRows, init, tp_size, tp_rank);
  LlamaHeads heads{d, b.n_heads, b.n_kv_heads, b.n_heads / tp_size, b.n_kv_heads / tp_size,
                   static_cast<float>(b.rope_theta)};
  auto attn = std::make_unique<LlamaAttention>(p + ".attn", heads, std::move(q), std::move(k), std::move(v),
                                               std::move(o), tp);
  auto mlp_norm = std::make_unique<RmsNorm>(p + ".mlp_norm", d, eps, init);
  auto gate = projection(p + ".mlp.gate", d, f, Split::kColumns, init, tp_size, tp_rank);
  auto up = projection(p + ".mlp.up", d, f, Split::kColumns, init, tp_size, tp_rank);
  auto down = projection(p + ".mlp.down", f, d, Split::kRows, init, tp_size, tp_rank);
  auto mlp = std::make_unique<SwigluMlp>(p + ".mlp", std::move(gate), std::move(up), std::move(down), tp);
  return std::make_unique<LlamaBlock>(p, std::move(attn_norm), std::move(attn), std::move(mlp_norm), std::move(mlp),
                                      tp);
}

}  // namespace cleave::layers
