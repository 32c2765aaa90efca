// Relu layer on the CPU (kernels/cpu/relu.hpp).
#include "layers/relu.hpp"

#include "kernels/cpu/relu.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

Tensor Relu::forward(const Tensor& x, Stash& stash, Context& ctx) {
  check_input(x, DType::kF32, -1, 0, "relu " + name_);
  Tensor y = new_activation(ctx, x.shape());
  kernels::cpu::relu_forward(x.data<float>(), y.data<float>(), x.numel());
  stash.tensors = {x};
  return y;
}

Tensor Relu::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor x = stash_at(stash, 0, "relu " + name_);
  CLEAVE_CHECK(dy.numel() == x.numel(), "relu {}: dy {} does not match the input {}", name_, dy.shape().str(),
               x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  kernels::cpu::relu_backward(x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel());
  stash.clear();
  return dx;
}

}  // namespace cleave::layers
