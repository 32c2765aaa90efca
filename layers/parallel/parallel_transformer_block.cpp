// Tensor-parallel pre-LN transformer block on the CPU: replicated LayerNorms and residuals around the
// parallel attention and MLP.
#include "layers/parallel/parallel_transformer_block.hpp"

#include <cmath>

#include "kernels/cpu/elementwise.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/tp_layout.hpp"

namespace cleave::layers {

namespace kc = kernels::cpu;

namespace {
// The same arithmetic as TransformerBlock's, so the residual projections start bit-identical.
ParamInit residual_init(const ParamInit& init, std::int64_t n_layers) {
  CLEAVE_CHECK(n_layers > 0, "transformer block: n_layers must be > 0, got {}", n_layers);
  return init.with_std(init.std / std::sqrt(2.0f * static_cast<float>(n_layers)));
}

const std::string& checked(const std::string& prefix, std::int64_t n_heads, std::int64_t d_ff, int tp_size) {
  check_tp_heads(n_heads, tp_size, d_ff);
  check_tp_d_ff(d_ff, tp_size, n_heads);
  return prefix;
}
}  // namespace

ParallelTransformerBlock::ParallelTransformerBlock(std::string prefix, std::int64_t d_model, std::int64_t n_heads,
                                                   std::int64_t d_ff, std::int64_t n_layers, const ParamInit& init,
                                                   int tp_size, int tp_rank)
    : prefix_(checked(prefix, n_heads, d_ff, tp_size)),
      ln1_(prefix_ + ".ln1", d_model, init),
      attn_(prefix_ + ".attn", d_model, n_heads, init, residual_init(init, n_layers), tp_size, tp_rank),
      ln2_(prefix_ + ".ln2", d_model, init),
      mlp_(prefix_ + ".mlp", d_model, d_ff, init, residual_init(init, n_layers), tp_size, tp_rank) {}

Tensor ParallelTransformerBlock::forward(const Tensor& x, Stash& stash, Context& ctx) {
  stash.clear();
  stash.children.resize(4);
  Tensor a = ln1_.forward(x, stash.children[0], ctx);
  Tensor x1 = attn_.forward(a, stash.children[1], ctx);
  kc::add_inplace(x1.data<float>(), x.data<float>(), x.numel());  // x1 = x + attn(ln1(x))
  Tensor m = ln2_.forward(x1, stash.children[2], ctx);
  Tensor y = mlp_.forward(m, stash.children[3], ctx);
  kc::add_inplace(y.data<float>(), x1.data<float>(), x1.numel());  // y = x1 + mlp(ln2(x1))
  return y;
}

Tensor ParallelTransformerBlock::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 4, "parallel transformer block {}: backward_input without forward",
                prefix_);
  // dy is kept by mlp.proj for its weight gradient and belongs to the caller: never written here.
  Tensor dm = mlp_.backward_input(dy, stash.children[3], ctx);
  Tensor dx1 = ln2_.backward_input(dm, stash.children[2], ctx);
  kc::add_inplace(dx1.data<float>(), dy.data<float>(), dy.numel());  // residual path
  Tensor da = attn_.backward_input(dx1, stash.children[1], ctx);
  Tensor dx = ln1_.backward_input(da, stash.children[0], ctx);
  kc::add_inplace(dx.data<float>(), dx1.data<float>(), dx1.numel());
  return dx;
}

void ParallelTransformerBlock::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 4, "parallel transformer block {}: backward_weight without forward",
                prefix_);
  ln1_.backward_weight(stash.children[0], ctx);
  attn_.backward_weight(stash.children[1], ctx);
  ln2_.backward_weight(stash.children[2], ctx);
  mlp_.backward_weight(stash.children[3], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> ParallelTransformerBlock::params() const {
  std::vector<std::shared_ptr<Param>> out;
  for (const Layer* layer : {static_cast<const Layer*>(&ln1_), static_cast<const Layer*>(&attn_),
                             static_cast<const Layer*>(&ln2_), static_cast<const Layer*>(&mlp_)}) {
    for (auto& p : layer->params()) out.push_back(p);
  }
  return out;
}

}  // namespace cleave::layers
