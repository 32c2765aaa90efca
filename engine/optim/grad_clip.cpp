// Gradient norm (ops::sum_squares_exact: an exact, order-independent sum with one wait for all gradients, reduced
// over ranks in its exact wire form) and clipping (ops::scale_inplace_many: one call for all gradients).
#include "engine/optim/grad_clip.hpp"

#include <cmath>
#include <vector>

#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::optim {
kernels::ExactSquareSum local_grad_sum_of_squares(const ParamList& params, const ParamFilter& counted,
                                                  const ops::Context& ctx) {
  std::vector<Tensor> list;
  return unique_grad_sum_of_squares(unique_params(params), counted, ctx, list);
}

kernels::ExactSquareSum unique_grad_sum_of_squares(const ParamList& unique, const ParamFilter& counted,
                                                   const ops::Context& ctx, std::vector<Tensor>& list) {
  list.clear();
  for (const auto& p : unique) {
    if (counted && !counted(*p)) continue;
    CLEAVE_CHECK(p->grad.dtype() == DType::kF32, "grad norm: parameter {} has {} grad; expected f32", p->name,
                 with_article(dtype_name(p->grad.dtype())));
    list.push_back(p->grad);
  }
  const kernels::ExactSquareSum sum = ops::sum_squares_exact(ctx, list);
  list.clear();  // holds no gradient between steps
  return sum;
}

double global_grad_norm(const ParamList& params, const SumReducer& all_reduce_sum, const ParamFilter& counted,
                        const ops::Context& ctx) {
  kernels::ExactSquareSum sum = local_grad_sum_of_squares(params, counted, ctx);
  if (all_reduce_sum) sum = kernels::ExactSquareSum::from_wire(all_reduce_sum(sum.to_wire()));
  return std::sqrt(sum.to_double());
}

double clip_grads(const ParamList& params, double max_norm, double norm, const ops::Context& ctx) {
  std::vector<Tensor> list;
  return clip_unique_grads(unique_params(params), max_norm, norm, ctx, list);
}

double clip_unique_grads(const ParamList& unique, double max_norm, double norm, const ops::Context& ctx,
                         std::vector<Tensor>& list) {
  if (max_norm <= 0.0 || !std::isfinite(norm) || norm <= max_norm) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  const float factor = static_cast<float>(scale);
  list.clear();  // one call for all (one OpenMP team on the CPU)
  for (const auto& p : unique) list.push_back(p->grad);
  ops::scale_inplace_many(ctx, list, factor);
  list.clear();
  return scale;
}

}  // namespace cleave::optim
