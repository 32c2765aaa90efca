// MaxPool: 2-D max pooling, NCHW, square window, no padding, stride = window unless given:
// [N, C, H, W] -> [N, C, (H - window) / stride + 1, (W - window) / stride + 1].
//
// Stash after forward: {argmax (i32, one per output)}; the input itself is not kept. The input's spatial
// size (needed to shape dx) is fixed at construction, as in the ModelSpec block it is built from.
#pragma once

#include <string>

#include "layers/layer.hpp"

namespace cleave::layers {

class MaxPool final : public Layer {
 public:
  MaxPool(std::string name, std::int64_t height, std::int64_t width, std::int64_t window, std::int64_t stride = 0);

  std::string_view kind() const override { return "maxpool"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;

  std::int64_t out_height() const { return (height_ - window_) / stride_ + 1; }
  std::int64_t out_width() const { return (width_ - window_) / stride_ + 1; }

 private:
  std::string name_;
  std::int64_t height_, width_, window_, stride_;
};

}  // namespace cleave::layers
