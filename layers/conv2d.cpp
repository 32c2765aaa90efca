// Conv2d (conv2d.hpp) over the op seam: parameters initialised from the fan-in C·k·k, the input checked against
// the channels and the padded kernel before any work. The stash holds {x} after forward, {x, dy} after
// backward_input, and is cleared by backward_weight, which consumes both.
#include "layers/conv2d.hpp"

#include "layers/layer_util.hpp"

namespace cleave::layers {

Conv2d::Conv2d(std::string prefix, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
               const ParamInit& init, std::int64_t stride, std::int64_t padding)
    : prefix_(std::move(prefix)),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding < 0 ? kernel / 2 : padding) {
  CLEAVE_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0 && stride > 0,
               "conv2d {}: in_channels ({}), out_channels ({}), kernel ({}) and stride ({}) must be > 0", prefix_,
               in_channels, out_channels, kernel, stride);
  const std::int64_t fan_in = in_channels * kernel * kernel;
  weight_ = make_param(prefix_ + ".weight", Shape{out_channels, in_channels, kernel, kernel}, true, init.allocator);
  bias_ = make_param(prefix_ + ".bias", Shape{out_channels}, false, init.allocator);
  init_weight(*weight_, fan_in, init);
  init_bias(*bias_, fan_in, init);
}

Tensor Conv2d::forward(const Tensor& x, Stash& stash, Context& ctx) {
  const std::string who = "conv2d " + prefix_;
  check_input(ctx, x, DType::kF32, -1, 4, who);
  CLEAVE_CHECK(x.rank() == 4 && x.dim(1) == in_channels_, "{}: expected [batch, {}, height, width], got {}", who,
               in_channels_, x.shape().str());
  const std::int64_t out_h = (x.dim(2) + 2 * padding_ - kernel_) / stride_ + 1;
  const std::int64_t out_w = (x.dim(3) + 2 * padding_ - kernel_) / stride_ + 1;
  CLEAVE_CHECK(x.dim(2) + 2 * padding_ >= kernel_ && x.dim(3) + 2 * padding_ >= kernel_,
               "{}: the {}x{} kernel does not fit the input {} padded by {}", who, kernel_, kernel_, x.shape().str(),
               padding_);
  Tensor y = new_activation(ctx, Shape{x.dim(0), out_channels_, out_h, out_w});
  ops::conv2d_forward(ctx, x, weight_->compute(), bias_->compute(), y, conv_params());
  stash.tensors = {x};
  return y;
}

Tensor Conv2d::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const std::string who = "conv2d " + prefix_;
  const Tensor& x = stash_at(stash, 0, who);
  Tensor dx = new_activation(ctx, x.shape());
  ops::conv2d_backward_input(ctx, dy, weight_->compute(), dx, conv_params());
  stash.tensors.push_back(dy);
  return dx;
}

void Conv2d::backward_weight(Stash& stash, Context& ctx) {
  const std::string who = "conv2d " + prefix_;
  const Tensor& x = stash_at(stash, 0, who);
  const Tensor& dy = stash_at(stash, 1, who);
  ops::conv2d_backward_weight(ctx, x, dy, weight_->grad, bias_->grad, conv_params());
  stash.clear();
}

}  // namespace cleave::layers
