// Relu: element-wise ReLU (gradient 0 at exactly 0, as PyTorch), any shape.
//
// Stash after forward: {x} (the derivative needs the input). backward_input releases it: no weights.
#pragma once

#include <string>

#include "layers/layer.hpp"

namespace cleave::layers {

class Relu final : public Layer {
 public:
  explicit Relu(std::string name = "relu") : name_(std::move(name)) {}

  std::string_view kind() const override { return "relu"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;

 private:
  std::string name_;
};

}  // namespace cleave::layers
