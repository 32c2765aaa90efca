// Transformer MLP on the CPU: composition of fc, Gelu, proj.
#include "layers/mlp.hpp"

#include "engine/core/error.hpp"
#include "layers/linear.hpp"

namespace cleave::layers {

Mlp::Mlp(std::string prefix, std::int64_t d_model, std::int64_t d_ff, const ParamInit& init,
         const ParamInit& proj_init)
    : prefix_(std::move(prefix)),
      fc_(std::make_unique<Linear>(prefix_ + ".fc", d_model, d_ff, true, init)),
      gelu_(prefix_ + ".gelu"),
      proj_(std::make_unique<Linear>(prefix_ + ".proj", d_ff, d_model, true, proj_init)) {}

Mlp::Mlp(std::string prefix, LayerPtr fc, LayerPtr proj, bool tensor_parallel)
    : prefix_(std::move(prefix)),
      tensor_parallel_(tensor_parallel),
      fc_(std::move(fc)),
      gelu_(prefix_ + ".gelu"),
      proj_(std::move(proj)) {
  CLEAVE_ASSERT(fc_ && proj_, "{}: needs fc and proj parts", who());
}

std::string Mlp::make_who() const { return (tensor_parallel_ ? "parallel mlp " : "mlp ") + prefix_; }

Tensor Mlp::forward(const Tensor& x, Stash& stash, Context& ctx) {
  stash.reset(3);
  Tensor h = fc_->forward(x, stash.children[0], ctx);
  Tensor g = gelu_.forward(h, stash.children[1], ctx);
  return proj_->forward(g, stash.children[2], ctx);
}

Tensor Mlp::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 3, "{}: backward_input without forward", who());
  Tensor dg = proj_->backward_input(dy, stash.children[2], ctx);
  Tensor dh = gelu_.backward_input(dg, stash.children[1], ctx);
  return fc_->backward_input(dh, stash.children[0], ctx);
}

void Mlp::backward_weight(Stash& stash, Context& ctx) {
  CLEAVE_ASSERT(stash.children.size() == 3, "{}: backward_weight without forward", who());
  fc_->backward_weight(stash.children[0], ctx);
  gelu_.backward_weight(stash.children[1], ctx);
  proj_->backward_weight(stash.children[2], ctx);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> Mlp::params() const {
  auto out = fc_->params();
  for (auto& p : proj_->params()) out.push_back(p);
  return out;
}

}  // namespace cleave::layers
