// RmsNorm layer over the op seam (rstd kept in f32).
#include "layers/llama/rmsnorm.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

RmsNorm::RmsNorm(std::string prefix, std::int64_t dim, float eps, const ParamInit& init)
    : prefix_(std::move(prefix)), dim_(dim), eps_(eps) {
  CLEAVE_CHECK(dim > 0 && eps > 0.0f, "rmsnorm {}: dim ({}) and eps ({}) must be > 0", prefix_, dim, eps);
  weight_ = make_param(prefix_ + ".weight", Shape{dim}, false, init.allocator);
  init_constant(*weight_, 1.0f);
}

Tensor RmsNorm::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, dim_, 1, who());
  Tensor y = new_activation(ctx, x.shape());
  Tensor rstd = new_activation(ctx, Shape{x.shape().rows()}, DType::kF32);
  ops::rmsnorm_forward(ctx, x, weight_->compute(), y, rstd, eps_);
  stash.tensors = {x, rstd};
  return y;
}

Tensor RmsNorm::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  const Tensor& rstd = stash_at(stash, 1, who());
  check_input(ctx, dy, DType::kF32, dim_, 1, who(), "dy");
  CLEAVE_ASSERT(dy.numel() == x.numel(), "{}: dy {} vs x {}", who(), dy.shape().str(), x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  ops::rmsnorm_backward_input(ctx, dy, x, weight_->compute(), rstd, dx);
  stash.tensors.push_back(dy);
  return dx;
}

Tensor RmsNorm::forward_residual(const Tensor& branch, const Tensor& residual, Stash& stash, Context& ctx) {
  check_input(ctx, branch, DType::kF32, dim_, 1, who());
  check_input(ctx, residual, DType::kF32, dim_, 1, who(), "residual");
  Tensor y = new_activation(ctx, branch.shape());
  Tensor rstd = new_activation(ctx, Shape{branch.shape().rows()}, DType::kF32);
  ops::add_rmsnorm_forward(ctx, branch, residual, weight_->compute(), branch, y, rstd, eps_);
  stash.tensors = {branch, rstd};
  return y;
}

Tensor RmsNorm::backward_input_residual(const Tensor& dy, const Tensor& dresidual, Stash& stash, Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  const Tensor& rstd = stash_at(stash, 1, who());
  check_input(ctx, dy, DType::kF32, dim_, 1, who(), "dy");
  check_input(ctx, dresidual, DType::kF32, dim_, 1, who(), "dresidual");
  CLEAVE_ASSERT(dy.numel() == x.numel(), "{}: dy {} vs x {}", who(), dy.shape().str(), x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  ops::add_rmsnorm_backward_input(ctx, dy, dresidual, x, weight_->compute(), rstd, dx);
  stash.tensors.push_back(dy);
  return dx;
}

void RmsNorm::backward_weight(Stash& stash, Context& ctx) {
  ops::rmsnorm_backward_weight(ctx, stash_at(stash, 2, who()), stash_at(stash, 0, who()), stash_at(stash, 1, who()),
                               weight_->grad);
  stash.clear();
}

}  // namespace cleave::layers
