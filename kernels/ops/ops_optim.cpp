// Optimizer updates: checks and dispatch (contracts in ops.hpp).
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using namespace detail;

void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper) {
  constexpr std::string_view op = "adamw_update";
  check_dtype(ctx, op, "param", param, DType::kF32);
  check_float(ctx, op, "grad", grad);
  check_dtype(ctx, op, "m", m, DType::kF32);
  check_dtype(ctx, op, "v", v, DType::kF32);
  check_same_numel(op, "param", param, "grad", grad);
  check_same_numel(op, "param", param, "m", m);
  check_same_numel(op, "param", param, "v", v);
  CLEAVE_CHECK(hyper.step >= 1, "{}: step must be >= 1, got {}", op, hyper.step);
  slot_of(ctx, &Backend::adamw_update, op)(ctx, param, grad, m, v, hyper);
}

void sgd_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                const SgdHyper& hyper) {
  constexpr std::string_view op = "sgd_update";
  check_dtype(ctx, op, "param", param, DType::kF32);
  check_float(ctx, op, "grad", grad);
  check_same_numel(op, "param", param, "grad", grad);
  if (hyper.momentum != 0.0f) {
    check_dtype(ctx, op, "momentum_buf", momentum_buf, DType::kF32);
    check_same_numel(op, "param", param, "momentum_buf", momentum_buf);
  }
  slot_of(ctx, &Backend::sgd_update, op)(ctx, param, grad, momentum_buf, hyper);
}

}  // namespace cleave::ops
