// Linear layer: three GEMMs through the op seam (forward with the bias epilogue, input gradient, weight gradient).
#include "layers/linear.hpp"

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

Linear::Linear(std::string prefix, std::int64_t in_features, std::int64_t out_features, bool bias,
               const ParamInit& init)
    : prefix_(std::move(prefix)), in_(in_features), out_(out_features) {
  CLEAVE_CHECK(in_features > 0 && out_features > 0, "linear {}: sizes must be > 0, got in {} out {}", prefix_,
               in_features, out_features);
  weight_ = make_param(prefix_ + ".weight", Shape{out_, in_}, true, init.allocator);
  init_weight(*weight_, in_, init);
  if (bias) {
    bias_ = make_param(prefix_ + ".bias", Shape{out_}, false, init.allocator);
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

std::string Linear::make_who() const { return "linear " + prefix_; }

Tensor Linear::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, in_, 1, who());
  Tensor y = new_activation(ctx, with_last(x.shape(), out_));
  ops::GemmOptions gemm;
  gemm.trans_b = true;
  if (bias_) {
    gemm.epilogue = ops::GemmEpilogue::kBias;
    gemm.bias = bias_->compute();
  }
  ops::gemm(ctx, x, weight_->compute(), y, gemm);  // y = x W^T (+ b)
  stash.tensors = {x};
  return y;
}

Tensor Linear::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  check_input(ctx, dy, DType::kF32, out_, 1, who(), "dy");
  CLEAVE_ASSERT(dy.shape().rows() == x.shape().rows(), "{}: dy {} does not match x {}", who(), dy.shape().str(),
                x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  ops::gemm(ctx, dy, weight_->compute(), dx);  // dx = dy W
  stash.tensors.push_back(dy);
  return dx;
}

void Linear::backward_weight(Stash& stash, Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  const Tensor& dy = stash_at(stash, 1, who());
  ops::GemmOptions accumulate;
  accumulate.trans_a = true;
  accumulate.beta = 1.0f;
  ops::gemm(ctx, dy, x, weight_->grad, accumulate);  // dW += dy^T x
  if (bias_) ops::bias_backward(ctx, dy, bias_->grad);
  stash.clear();
}

std::vector<std::shared_ptr<Param>> Linear::params() const {
  if (bias_) return {weight_, bias_};
  return {weight_};
}

}  // namespace cleave::layers
