// LayerNorm layer on the CPU (kernels/cpu/layernorm.hpp).
#include "layers/layernorm.hpp"

#include "kernels/cpu/layernorm.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

namespace kc = kernels::cpu;

LayerNorm::LayerNorm(std::string prefix, std::int64_t dim, const ParamInit& init, float eps)
    : prefix_(std::move(prefix)), dim_(dim), eps_(eps) {
  CLEAVE_CHECK(dim > 0, "layernorm {}: dim must be > 0, got {}", prefix_, dim);
  gamma_ = make_param(prefix_ + ".weight", Shape{dim}, false, init.alloc());
  beta_ = make_param(prefix_ + ".bias", Shape{dim}, false, init.alloc());
  init_constant(*gamma_, 1.0f);
  init_constant(*beta_, 0.0f);
}

Tensor LayerNorm::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(x, DType::kF32, dim_, 1, "layernorm " + prefix_);
  const std::int64_t rows = x.shape().rows();
  Tensor y = new_activation(ctx, x.shape());
  Tensor mean = new_activation(ctx, Shape{rows});
  Tensor rstd = new_activation(ctx, Shape{rows});
  kc::layernorm_forward(x.data<float>(), gamma_->value.data<float>(), beta_->value.data<float>(), y.data<float>(),
                        mean.data<float>(), rstd.data<float>(), rows, dim_, eps_);
  stash.tensors = {x, mean, rstd};
  return y;
}

Tensor LayerNorm::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const std::string who = "layernorm " + prefix_;
  const Tensor& x = stash_at(stash, 0, who);
  const Tensor& mean = stash_at(stash, 1, who);
  const Tensor& rstd = stash_at(stash, 2, who);
  check_input(dy, DType::kF32, dim_, 1, who + " (dy)");
  CLEAVE_ASSERT(dy.numel() == x.numel(), "{}: dy {} vs x {}", who, dy.shape().str(), x.shape().str());
  const std::int64_t rows = x.shape().rows();
  Tensor dx = new_activation(ctx, x.shape());
  kc::layernorm_backward_input(dy.data<float>(), x.data<float>(), gamma_->value.data<float>(), mean.data<float>(),
                               rstd.data<float>(), dx.data<float>(), rows, dim_);
  stash.tensors.push_back(dy);
  return dx;
}

void LayerNorm::backward_weight(Stash& stash, Context& ctx) {
  (void)ctx;
  const std::string who = "layernorm " + prefix_;
  const Tensor& x = stash_at(stash, 0, who);
  const Tensor& dy = stash_at(stash, 3, who);
  kc::layernorm_backward_weight(dy.data<float>(), x.data<float>(), stash_at(stash, 1, who).data<float>(),
                                stash_at(stash, 2, who).data<float>(), gamma_->grad.data<float>(),
                                beta_->grad.data<float>(), x.shape().rows(), dim_);
  stash.clear();
}

}  // namespace cleave::layers
