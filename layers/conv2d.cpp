// Conv2d layer on the CPU: im2col + GEMM per image (kernels/cpu/conv2d.hpp).
#include "layers/conv2d.hpp"

#include "layers/layer_util.hpp"

namespace cleave::layers {

namespace kc = kernels::cpu;

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
  weight_ = make_param(prefix_ + ".weight", Shape{out_channels, in_channels, kernel, kernel}, true, init.alloc());
  bias_ = make_param(prefix_ + ".bias", Shape{out_channels}, false, init.alloc());
  init_weight(*weight_, fan_in, init);
  init_bias(*bias_, fan_in, init);
}

kc::Conv2dShape Conv2d::shape_for(const Tensor& x) const {
  kc::Conv2dShape s;
  s.batch = x.dim(0);
  s.in_channels = in_channels_;
  s.height = x.dim(2);
  s.width = x.dim(3);
  s.out_channels = out_channels_;
  s.kernel = kernel_;
  s.stride = stride_;
  s.padding = padding_;
  return s;
}

Tensor Conv2d::forward(const Tensor& x, Stash& stash, Context& ctx) {
  const std::string who = "conv2d " + prefix_;
  check_input(x, DType::kF32, -1, 4, who);
  CLEAVE_CHECK(x.rank() == 4 && x.dim(1) == in_channels_, "{}: expected [batch, {}, height, width], got {}", who,
               in_channels_, x.shape().str());
  const kc::Conv2dShape s = shape_for(x);
  kc::conv2d_check_shape(s);
  Tensor y = new_activation(ctx, Shape{s.batch, out_channels_, s.out_height(), s.out_width()});
  Tensor ws = new_workspace(ctx, Shape{kc::conv2d_workspace_floats(s)});
  kc::conv2d_forward(s, x.data<float>(), weight_->value.data<float>(), bias_->value.data<float>(), y.data<float>(),
                     ws.data<float>());
  stash.tensors = {x};
  return y;
}

Tensor Conv2d::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const std::string who = "conv2d " + prefix_;
  const Tensor& x = stash_at(stash, 0, who);
  const kc::Conv2dShape s = shape_for(x);
  CLEAVE_ASSERT(dy.numel() == s.batch * out_channels_ * s.out_height() * s.out_width(), "{}: dy {} for x {}", who,
                dy.shape().str(), x.shape().str());
  Tensor dx = new_activation(ctx, x.shape());
  Tensor ws = new_workspace(ctx, Shape{kc::conv2d_workspace_floats(s)});
  kc::conv2d_backward_input(s, dy.data<float>(), weight_->value.data<float>(), dx.data<float>(), ws.data<float>());
  stash.tensors.push_back(dy);
  return dx;
}

void Conv2d::backward_weight(Stash& stash, Context& ctx) {
  const std::string who = "conv2d " + prefix_;
  const Tensor& x = stash_at(stash, 0, who);
  const Tensor& dy = stash_at(stash, 1, who);
  const kc::Conv2dShape s = shape_for(x);
  Tensor ws = new_workspace(ctx, Shape{kc::conv2d_workspace_floats(s)});
  kc::conv2d_backward_weight(s, x.data<float>(), dy.data<float>(), weight_->grad.data<float>(),
                             bias_->grad.data<float>(), ws.data<float>());
  stash.clear();
}

}  // namespace cleave::layers
