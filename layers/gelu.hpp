// Gelu: element-wise GELU (tanh approximation, as GPT-2), any shape.
//
// Stash after forward: {x} (the derivative needs the input). backward_input releases it: no weights.
#pragma once

#include <string>

#include "layers/layer.hpp"

namespace cleave::layers {

class Gelu final : public Layer {
 public:
  explicit Gelu(std::string name = "gelu") : name_(std::move(name)) {}

  std::string_view kind() const override { return "gelu"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;

 private:
  std::string name_;
};

}  // namespace cleave::layers
