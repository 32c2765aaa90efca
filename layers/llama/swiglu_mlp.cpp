// SwiGLU MLP: composition of gate and up projections, the seam's swiglu op, and the down projection.
#include "layers/llama/swiglu_mlp.hpp"

#include <array>

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/tp_projection.hpp"

namespace cleave::layers {

SwigluMlp::SwigluMlp(std::string prefix, LayerPtr gate, LayerPtr up, LayerPtr down, bool tensor_parallel)
    : prefix_(std::move(prefix)),
      tensor_parallel_(tensor_parallel),
      gate_(std::move(gate)),
      up_(std::move(up)),
      down_(std::move(down)) {
  CLEAVE_ASSERT(gate_ && up_ && down_, "{}: needs gate, up and down parts", who());
}

namespace {
std::array<Stash*, 2> gate_up_stashes(Stash& stash) { return {&stash.children[0], &stash.children[1]}; }
}  // namespace

Tensor SwigluMlp::forward(const Tensor& x, Stash& stash, Context& ctx) {
  stash.reset(3);
  std::array<Tensor, 2> projected;
  gate_up_.forward(x, gate_up_stashes(stash), projected, ctx);
  const Tensor &g = projected[0], &u = projected[1];
  Tensor h = new_activation(ctx, g.shape());
  ops::swiglu_forward(ctx, g, u, h);
  stash.tensors = {g, u};
  return down_->forward(h, stash.children[2], ctx);
}

Tensor SwigluMlp::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 3, "{}: backward_input without forward", who());
  const Tensor& g = stash_at(stash, 0, who());
  Tensor dg = new_activation(ctx, g.shape());
  Tensor du = new_activation(ctx, g.shape());
  {  // dh, gate and up outputs are released before the projections' backward
    const Tensor dh = down_->backward_input(dy, stash.children[2], ctx);
    ops::swiglu_backward(ctx, g, stash_at(stash, 1, who()), dh, dg, du);
    stash.tensors.clear();
  }
  const std::array<Tensor, 2> dys{dg, du};
  return gate_up_.backward_input(dys, gate_up_stashes(stash), ctx);
}

void SwigluMlp::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 3, "{}: backward_weight without forward", who());
  gate_up_.backward_weight(gate_up_stashes(stash), ctx);
  down_->backward_weight(stash.children[2], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> SwigluMlp::params() const {
  std::vector<std::shared_ptr<Param>> out;
  for (const Layer* part : {gate_.get(), up_.get(), down_.get()}) {
    for (auto& p : part->params()) out.push_back(p);
  }
  return out;
}

std::unique_ptr<SwigluMlp> make_swiglu_mlp(const std::string& prefix, std::int64_t d, std::int64_t f,
                                           const ParamInit& init, int tp_size, int tp_rank) {
  auto gate = tp_projection(prefix + ".gate", d, f, TpSplit::kColumns, init, tp_size, tp_rank);
  auto up = tp_projection(prefix + ".up", d, f, TpSplit::kColumns, init, tp_size, tp_rank);
  auto down = tp_projection(prefix + ".down", f, d, TpSplit::kRows, init, tp_size, tp_rank);
  return std::make_unique<SwigluMlp>(prefix, std::move(gate), std::move(up), std::move(down), tp_size > 1);
}

}  // namespace cleave::layers
