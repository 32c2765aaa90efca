// Element-wise activation layers on the CPU (kernels/cpu/gelu.hpp, kernels/cpu/relu.hpp).
#include "layers/activation.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/relu.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

Activation::Activation(std::string_view kind, std::string name, ForwardFn forward, BackwardFn backward)
    : kind_(kind), name_(std::move(name)), forward_(forward), backward_(backward) {}

std::string Activation::who() const { return std::string(kind_) + " " + name_; }

Tensor Activation::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(x, DType::kF32, -1, 0, who());
  Tensor y = new_activation(ctx, x.shape());
  forward_(x.data<float>(), y.data<float>(), x.numel());
  stash.tensors = {x};
  return y;
}

Tensor Activation::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor x = stash_at(stash, 0, who());
  CLEAVE_CHECK(dy.numel() == x.numel(), "{}: dy {} does not match the input {}", who(), dy.shape().str(),
               x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  backward_(x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel());
  stash.clear();
  return dx;
}

Gelu::Gelu(std::string name)
    : Activation("gelu", std::move(name), kernels::cpu::gelu_forward, kernels::cpu::gelu_backward) {}

Relu::Relu(std::string name)
    : Activation("relu", std::move(name), kernels::cpu::relu_forward, kernels::cpu::relu_backward) {}

}  // namespace cleave::layers
