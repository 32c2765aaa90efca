// Linear layer on the CPU: three row-major GEMMs (forward, input gradient, weight gradient).
#include "layers/linear.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/gemm.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

namespace kc = kernels::cpu;

Linear::Linear(std::string prefix, std::int64_t in_features, std::int64_t out_features, bool bias,
               const ParamInit& init)
    : prefix_(std::move(prefix)), in_(in_features), out_(out_features) {
  CLEAVE_CHECK(in_features > 0 && out_features > 0, "linear {}: sizes must be > 0, got in {} out {}", prefix_,
               in_features, out_features);
  weight_ = make_param(prefix_ + ".weight", Shape{out_, in_}, true, init.alloc());
  init_weight(*weight_, in_, init);
  if (bias) {
    bias_ = make_param(prefix_ + ".bias", Shape{out_}, false, init.alloc());
    init_bias(*bias_, in_, init);
  }
}

Linear::Linear(std::string prefix, std::shared_ptr<Param> weight, std::shared_ptr<Param> bias)
    : prefix_(std::move(prefix)), weight_(std::move(weight)), bias_(std::move(bias)) {
  CLEAVE_ASSERT(weight_ && weight_->value.rank() == 2, "linear {}: weight must be a 2-D Param", prefix_);
  out_ = weight_->value.dim(0);
  in_ = weight_->value.dim(1);
  CLEAVE_ASSERT(!bias_ || (bias_->value.rank() == 1 && bias_->value.dim(0) == out_),
                "linear {}: bias must be [{}]", prefix_, out_);
}

std::string Linear::who() const { return "linear " + prefix_; }

Tensor Linear::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(x, DType::kF32, in_, 1, who());
  const std::int64_t rows = x.shape().rows();
  Tensor y = new_activation(ctx, with_last(x.shape(), out_));
  kc::gemm(false, true, rows, out_, in_, 1.0f, x.data<float>(), in_, weight_->value.data<float>(), in_, 0.0f,
           y.data<float>(), out_);
  if (bias_) kc::bias_add_forward(y.data<float>(), bias_->value.data<float>(), rows, out_);
  stash.tensors = {x};
  return y;
}

Tensor Linear::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  check_input(dy, DType::kF32, out_, 1, who() + " (dy)");
  CLEAVE_ASSERT(dy.shape().rows() == x.shape().rows(), "{}: dy {} does not match x {}", who(), dy.shape().str(),
                x.shape().str());
  const std::int64_t rows = x.shape().rows();
  Tensor dx = new_activation(ctx, x.shape());
  kc::gemm(false, false, rows, in_, out_, 1.0f, dy.data<float>(), out_, weight_->value.data<float>(), in_, 0.0f,
           dx.data<float>(), in_);
  stash.tensors.push_back(dy);
  return dx;
}

void Linear::backward_weight(Stash& stash, Context& ctx) {
  (void)ctx;
  const Tensor& x = stash_at(stash, 0, who());
  const Tensor& dy = stash_at(stash, 1, who());
  const std::int64_t rows = x.shape().rows();
  kc::gemm(true, false, out_, in_, rows, 1.0f, dy.data<float>(), out_, x.data<float>(), in_, 1.0f,
           weight_->grad.data<float>(), in_);
  if (bias_) kc::bias_backward(dy.data<float>(), bias_->grad.data<float>(), rows, out_);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> Linear::params() const {
  if (bias_) return {weight_, bias_};
  return {weight_};
}

}  // namespace cleave::layers
