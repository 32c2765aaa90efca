// Softmax cross-entropy loss layer on the CPU (kernels/cpu/cross_entropy.hpp).
#include "layers/softmax_cross_entropy.hpp"

#include "kernels/cpu/cross_entropy.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {

namespace kc = kernels::cpu;

Tensor SoftmaxCrossEntropy::forward(const Tensor& logits, Stash& stash, Context& ctx) {
  check_input(logits, DType::kF32, -1, 1, "softmax_cross_entropy");
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  CLEAVE_CHECK(ctx.targets.defined(), "softmax_cross_entropy: no targets in the context (Context::targets)");
  CLEAVE_CHECK(ctx.targets.dtype() == DType::kI32 && ctx.targets.numel() == rows,
               "softmax_cross_entropy: expected {} i32 targets for logits {}, got {} {}", rows, logits.shape().str(),
               ctx.targets.shape().str(), dtype_name(ctx.targets.dtype()));
  Tensor lse = new_activation(ctx, Shape{rows});
  const double sum = kc::softmax_cross_entropy_forward(logits.data<float>(), ctx.targets.data<std::int32_t>(),
                                                       lse.data<float>(), rows, classes);
  const std::int64_t valid = kc::count_valid_targets(ctx.targets.data<std::int32_t>(), rows);
  Tensor loss = new_activation(ctx, Shape{});
  loss.data<float>()[0] = valid > 0 ? static_cast<float>(sum / static_cast<double>(valid)) : 0.0f;
  stash.tensors = {logits, ctx.targets, lse};
  return loss;
}

Tensor SoftmaxCrossEntropy::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor logits = stash_at(stash, 0, "softmax_cross_entropy");
  const Tensor targets = stash_at(stash, 1, "softmax_cross_entropy");
  const Tensor lse = stash_at(stash, 2, "softmax_cross_entropy");
  CLEAVE_CHECK(dy.defined() && dy.numel() == 1 && dy.dtype() == DType::kF32,
               "softmax_cross_entropy: dy must be one f32 element (the loss scale)");
  const std::int64_t rows = logits.shape().rows(), classes = logits.shape().last();
  const std::int64_t valid = kc::count_valid_targets(targets.data<std::int32_t>(), rows);
  const float scale = valid > 0 ? dy.data<float>()[0] / static_cast<float>(valid) : 0.0f;
  Tensor dlogits = new_activation(ctx, logits.shape());
  kc::softmax_cross_entropy_backward(logits.data<float>(), targets.data<std::int32_t>(), lse.data<float>(), scale,
                                     dlogits.data<float>(), rows, classes);
  stash.clear();
  return dlogits;
}

}  // namespace cleave::layers
