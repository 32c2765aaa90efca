// LayerNorm layer over the op seam (statistics mean and rstd kept in f32).
#include "layers/layernorm.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

LayerNorm::LayerNorm(std::string prefix, std::int64_t dim, const ParamInit& init, float eps)
    : prefix_(std::move(prefix)), dim_(dim), eps_(eps) {
  CLEAVE_CHECK(dim > 0, "layernorm {}: dim must be > 0, got {}", prefix_, dim);
  gamma_ = make_param(prefix_ + ".weight", Shape{dim}, false, init.allocator);
  beta_ = make_param(prefix_ + ".bias", Shape{dim}, false, init.allocator);
  init_constant(*gamma_, 1.0f);
  init_constant(*beta_, 0.0f);
}

Tensor LayerNorm::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, dim_, 1, who_);
  const std::int64_t rows = x.shape().rows();
  Tensor y = new_activation(ctx, x.shape());
  Tensor mean = new_activation(ctx, Shape{rows}, DType::kF32);
  Tensor rstd = new_activation(ctx, Shape{rows}, DType::kF32);
  ops::layernorm_forward(ctx, x, gamma_->compute(), beta_->compute(), y, mean, rstd, eps_);
  stash.tensors = {x, mean, rstd};
  return y;
}

Tensor LayerNorm::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const std::string& who = who_;
  const Tensor& x = stash_at(stash, 0, who);
  const Tensor& mean = stash_at(stash, 1, who);
  const Tensor& rstd = stash_at(stash, 2, who);
  check_input(ctx, dy, DType::kF32, dim_, 1, who, "dy");
  CLEAVE_ASSERT(dy.numel() == x.numel(), "{}: dy {} vs x {}", who, dy.shape().str(), x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  ops::layernorm_backward_input(ctx, dy, x, gamma_->compute(), mean, rstd, dx);
  stash.tensors.push_back(dy);
  return dx;
}

void LayerNorm::backward_weight(Stash& stash, Context& ctx) {
  const std::string& who = who_;
  const Tensor& x = stash_at(stash, 0, who);
  const Tensor& dy = stash_at(stash, 3, who);
  ops::layernorm_backward_weight(ctx, dy, x, stash_at(stash, 1, who), stash_at(stash, 2, who), gamma_->grad,
                                 beta_->grad);
  stash.clear();
}

}  // namespace cleave::layers
