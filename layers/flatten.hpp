// Flatten: [N, d1, d2, ...] -> [N, d1·d2·...] as a view (no copy, nothing stashed). The per-sample
// input shape is fixed at construction so backward can restore it without a stash.
#pragma once

#include "layers/layer.hpp"

namespace cleave::layers {

class Flatten final : public Layer {
 public:
  explicit Flatten(const Shape& sample_shape) : sample_(sample_shape) {}

  std::string_view kind() const override { return "flatten"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;

 private:
  Shape sample_;
};

}  // namespace cleave::layers
