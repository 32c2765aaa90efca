// Global gradient norm and clipping.
//
// The norm is the true global norm: sqrt of the sum of squares of every logical gradient element, each
// counted once. Locally, repeated Param objects (a tied head) are counted once; across ranks the caller
// supplies `all_reduce_sum` (sums a double over the ranks that hold different parameters: tp and pp; dp
// replicas hold identical reduced grads) and `counted` (false for copies another rank already counts: a
// tp-replicated LayerNorm on tp rank > 0, the tied embedding's copy on the last pipeline stage). This file
// knows nothing of communicators: the hook is a plain std::function.
// The sum is exact (ops::sum_squares_exact, kernels/exact_square_sum.hpp): fixed-point digits that ranks add
// element-wise, so the norm has the same bits for any thread count, any split of the gradients over ranks
// (dp shards, ZeRO buckets, expert-parallel layouts) and any reduction order.
#pragma once

#include <functional>
#include <vector>

#include "engine/optim/optimizer.hpp"
#include "kernels/exact_square_sum.hpp"
#include "kernels/ops/context.hpp"

namespace cleave::optim {

// Σ g² comes from ops::sum_squares_exact: on a GPU one read-back for all gradients.

// Sums a vector of doubles element-wise over the ranks (an all-reduce). The norm passes the exact sum's wire
// form (ExactSquareSum::to_wire), whose element sums are exact in any order.
using SumReducer = std::function<std::vector<double>(const std::vector<double>&)>;
using ParamFilter = std::function<bool(const layers::Param&)>;

// Sum over this rank's gradients of g², each Param once, only those `counted` accepts (all when empty).
// ctx: where the gradients live and the ops run (default: the CPU).
kernels::ExactSquareSum local_grad_sum_of_squares(const ParamList& params, const ParamFilter& counted = {},
                                                  const ops::Context& ctx = {});

// sqrt(all_reduce_sum(local sum of squares)); all_reduce_sum empty = single rank. May be inf or NaN when a
// gradient is: the caller decides whether to skip the step.
double global_grad_norm(const ParamList& params, const SumReducer& all_reduce_sum = {},
                        const ParamFilter& counted = {}, const ops::Context& ctx = {});

// Scales every grad by max_norm / (norm + 1e-6) when norm > max_norm (torch.nn.utils.clip_grad_norm_).
// Returns the factor applied: 1 when max_norm <= 0 (off), norm <= max_norm, or norm is not finite (grads
// are then left untouched).
double clip_grads(const ParamList& params, double max_norm, double norm, const ops::Context& ctx = {});

// The same two over `unique` (each Param once: unique_params' result, which the caller keeps from step to step),
// listing the gradients into `list` (the caller's, refilled each call): a steady-state step allocates nothing.
kernels::ExactSquareSum unique_grad_sum_of_squares(const ParamList& unique, const ParamFilter& counted,
                                                   const ops::Context& ctx, std::vector<Tensor>& list);
double clip_unique_grads(const ParamList& unique, double max_norm, double norm, const ops::Context& ctx,
                         std::vector<Tensor>& list);

}  // namespace cleave::optim
