// Element-wise activation layers (GELU, ReLU) over the op seam.
#include "layers/activation.hpp"

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

Activation::Activation(std::string_view kind, std::string name, ForwardFn forward, BackwardFn backward)
    : kind_(kind), name_(std::move(name)), forward_(forward), backward_(backward) {}

std::string Activation::make_who() const { return std::string(kind_) + " " + name_; }

Tensor Activation::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(ctx, x, DType::kF32, -1, 0, who());
  Tensor y = new_activation(ctx, x.shape());
  forward_(ctx, x, y);
  stash.tensors = {x};
  return y;
}

Tensor Activation::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor x = stash_at(stash, 0, who());
  CLEAVE_CHECK(dy.numel() == x.numel(), "{}: dy {} does not match the input {}", who(), dy.shape().str(),
               x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  backward_(ctx, x, dy, dx);
  stash.clear();
  return dx;
}

Gelu::Gelu(std::string name)
    : Activation("gelu", std::move(name), ops::gelu_forward, ops::gelu_backward) {}

Relu::Relu(std::string name)
    : Activation("relu", std::move(name), ops::relu_forward, ops::relu_backward) {}

}  // namespace cleave::layers
