// MaxPool (maxpool.hpp) over the op seam: the input checked against the construction's height and width before any
// work; the stash holds only the forward's argmax (i32, one per output), which backward_input routes dy through and
// then clears.
#include "layers/maxpool.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

MaxPool::MaxPool(std::string name, std::int64_t height, std::int64_t width, std::int64_t window, std::int64_t stride)
    : name_(std::move(name)), height_(height), width_(width), window_(window), stride_(stride > 0 ? stride : window) {
  CLEAVE_CHECK(window > 0 && window <= height && window <= width,
               "maxpool {}: window ({}) must be > 0 and fit the {}x{} input", name_, window, height, width);
}

Tensor MaxPool::forward(const Tensor& x, Stash& stash, Context& ctx) {
  const std::string who = "maxpool " + name_;
  check_input(ctx, x, DType::kF32, width_, 4, who);
  CLEAVE_CHECK(x.rank() == 4 && x.dim(2) == height_, "{}: expected [batch, channels, {}, {}], got {}", who, height_,
               width_, x.shape().str());
  const std::int64_t n = x.dim(0), c = x.dim(1);
  const Shape out{n, c, out_height(), out_width()};
  Tensor y = new_activation(ctx, out);
  Tensor argmax = new_activation(ctx, out, DType::kI32);
  ops::maxpool2d_forward(ctx, x, y, argmax, window_, stride_);
  stash.tensors = {argmax};
  return y;
}

Tensor MaxPool::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor argmax = stash_at(stash, 0, "maxpool " + name_);
  CLEAVE_ASSERT(dy.numel() == argmax.numel(), "maxpool {}: dy {} for output {}", name_, dy.shape().str(),
                argmax.shape().str());
  const std::int64_t n = argmax.dim(0), c = argmax.dim(1);
  Tensor dx = new_activation(ctx, Shape{n, c, height_, width_});
  ops::maxpool2d_backward(ctx, dy, argmax, dx, window_, stride_);
  stash.clear();
  return dx;
}

}  // namespace cleave::layers
