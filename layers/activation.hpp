// Element-wise activations, any shape: Gelu (tanh approximation, as GPT-2) and Relu (gradient 0 at exactly
// 0, as PyTorch). One implementation, Activation, runs the op-seam pair `ops::<op>_forward(ctx, x, y)` /
// `ops::<op>_backward(ctx, x, dy, dx)` it is given (kernels/ops/ops.hpp); a new activation is a subclass naming
// its pair.
//
// Stash after forward: {x} (the derivative needs the input). backward_input releases it: no weights.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "layers/layer.hpp"

namespace cleave::layers {

class Activation : public Layer {
 public:
  using ForwardFn = void (*)(const ops::Context&, const Tensor& x, const Tensor& y);  // an op of the seam
  using BackwardFn = void (*)(const ops::Context&, const Tensor& x, const Tensor& dy, const Tensor& dx);

  std::string_view kind() const override { return kind_; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;

 protected:
  // `kind` must outlive the layer (a string literal); messages name the layer "<kind> <name>".
  Activation(std::string_view kind, std::string name, ForwardFn forward, BackwardFn backward);

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const;

  std::string_view kind_;
  std::string name_;
  ForwardFn forward_;
  BackwardFn backward_;
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

class Gelu final : public Activation {
 public:
  explicit Gelu(std::string name = "gelu");
};

class Relu final : public Activation {
 public:
  explicit Relu(std::string name = "relu");
};

}  // namespace cleave::layers
