// HeadRmsNorm over the op seam: rmsnorm on the [rows·heads, hd] view (rstd kept in f32).
#include "layers/llama/head_rmsnorm.hpp"

#include "kernels/ops/ops.hpp"
#include "layers/layer_util.hpp"
#include "layers/parallel/tp_util.hpp"

namespace cleave::layers {

HeadRmsNorm::HeadRmsNorm(std::string prefix, std::int64_t head_dim, float eps, const ParamInit& init, int tp_size,
                         int tp_rank)
    : prefix_(std::move(prefix)), head_dim_(head_dim), eps_(eps), tp_size_(tp_size), tp_rank_(tp_rank) {
  CLEAVE_CHECK(head_dim > 0 && eps > 0.0f, "head rmsnorm {}: head_dim ({}) and eps ({}) must be > 0", prefix_,
               head_dim, eps);
  check_tp_coordinates(tp_size, tp_rank, who());
  weight_ = make_param(prefix_ + ".weight", Shape{head_dim}, false, init.allocator);
  init_constant(*weight_, 1.0f);
}

Shape HeadRmsNorm::rows_of(const Tensor& x) const {
  CLEAVE_CHECK(x.rank() >= 1 && x.dim(x.rank() - 1) % head_dim_ == 0,
               "{}: the last dimension of {} is not a whole number of heads of {} columns", who(), x.shape().str(),
               head_dim_);
  return Shape{x.numel() / head_dim_, head_dim_};
}

Tensor HeadRmsNorm::forward(const Tensor& x, Stash& stash, Context& ctx) {
  const Shape rows = rows_of(x);
  Tensor y = new_activation(ctx, x.shape());
  Tensor rstd = new_activation(ctx, Shape{rows.dims()[0]}, DType::kF32);
  ops::rmsnorm_forward(ctx, x.view(rows), weight_->compute(), y.view(rows), rstd, eps_);
  stash.tensors = {x, rstd};
  return y;
}

Tensor HeadRmsNorm::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  const Tensor& rstd = stash_at(stash, 1, who());
  CLEAVE_ASSERT(dy.numel() == x.numel(), "{}: dy {} vs x {}", who(), dy.shape().str(), x.shape().str());
  const Shape rows = rows_of(x);
  Tensor dx = new_activation(ctx, x.shape());
  ops::rmsnorm_backward_input(ctx, dy.view(rows), x.view(rows), weight_->compute(), rstd, dx.view(rows));
  stash.tensors.push_back(dy);
  return dx;
}

void HeadRmsNorm::backward_weight(Stash& stash, Context& ctx) {
  const Tensor& x = stash_at(stash, 0, who());
  const Tensor& dy = stash_at(stash, 2, who());
  const Shape rows = rows_of(x);
  if (tp_size_ == 1 || sequence_parallel(ctx, tp_size_)) {
    ops::rmsnorm_backward_weight(ctx, dy.view(rows), x.view(rows), stash_at(stash, 1, who()), weight_->grad);
  } else {  // this rank's heads' share, summed over tp before it joins the gradient
    Tensor part = new_activation(ctx, Shape{head_dim_}, DType::kF32);
    ops::fill(ctx, part, 0.0f);
    ops::rmsnorm_backward_weight(ctx, dy.view(rows), x.view(rows), stash_at(stash, 1, who()), part);
    tp_all_reduce(part, comm::ReduceOp::kSum, ctx, tp_size_, tp_rank_, who());
    ops::add_inplace(ctx, weight_->grad, part);
  }
  stash.clear();
}

}  // namespace cleave::layers
