// Optimizer updates: checks and dispatch (contracts in ops.hpp), and the per-item multi-tensor slots a backend
// without multi-tensor kernels uses (backend.hpp).
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using namespace detail;

namespace {

void check_adamw(const Context& ctx, std::string_view op, const Tensor& param, const Tensor& grad, const Tensor& m,
                 const Tensor& v, std::int64_t step) {
  check_dtype(ctx, op, "param", param, DType::kF32);
  check_float(ctx, op, "grad", grad);
  check_dtype(ctx, op, "m", m, DType::kF32);
  check_dtype(ctx, op, "v", v, DType::kF32);
  check_same_numel(op, "param", param, "grad", grad);
  check_same_numel(op, "param", param, "m", m);
  check_same_numel(op, "param", param, "v", v);
  CLEAVE_CHECK(step >= 1, "{}: step must be >= 1, got {}", op, step);
}

void check_sgd(const Context& ctx, std::string_view op, const Tensor& param, const Tensor& grad,
               const Tensor& momentum_buf, const SgdHyper& hyper) {
  check_dtype(ctx, op, "param", param, DType::kF32);
  check_float(ctx, op, "grad", grad);
  check_same_numel(op, "param", param, "grad", grad);
  if (hyper.momentum != 0.0f) {
    check_dtype(ctx, op, "momentum_buf", momentum_buf, DType::kF32);
    check_same_numel(op, "param", param, "momentum_buf", momentum_buf);
  }
}

}  // namespace

void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper) {
  constexpr std::string_view op = "adamw_update";
  check_adamw(ctx, op, param, grad, m, v, hyper.step);
  slot_of(ctx, &Backend::adamw_update, op)(ctx, param, grad, m, v, hyper);
}

void sgd_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                const SgdHyper& hyper) {
  constexpr std::string_view op = "sgd_update";
  check_sgd(ctx, op, param, grad, momentum_buf, hyper);
  slot_of(ctx, &Backend::sgd_update, op)(ctx, param, grad, momentum_buf, hyper);
}

void adamw_update_many(const Context& ctx, std::span<const AdamWItem> items, const AdamWHyper& hyper) {
  constexpr std::string_view op = "adamw_update_many";
  for (const AdamWItem& item : items) check_adamw(ctx, op, item.param, item.grad, item.m, item.v, hyper.step);
  slot_of(ctx, &Backend::adamw_update_many, op)(ctx, items, hyper);
}

void sgd_update_many(const Context& ctx, std::span<const SgdItem> items, const SgdHyper& hyper) {
  constexpr std::string_view op = "sgd_update_many";
  for (const SgdItem& item : items) check_sgd(ctx, op, item.param, item.grad, item.momentum_buf, hyper);
  slot_of(ctx, &Backend::sgd_update_many, op)(ctx, items, hyper);
}

namespace detail {

void adamw_update_each(const Context& ctx, std::span<const AdamWItem> items, const AdamWHyper& hyper) {
  const auto slot = slot_of(ctx, &Backend::adamw_update, "adamw_update");
  for (const AdamWItem& item : items) {
    AdamWHyper h = hyper;
    h.weight_decay = item.weight_decay;
    slot(ctx, item.param, item.grad, item.m, item.v, h);
  }
}

void sgd_update_each(const Context& ctx, std::span<const SgdItem> items, const SgdHyper& hyper) {
  const auto slot = slot_of(ctx, &Backend::sgd_update, "sgd_update");
  for (const SgdItem& item : items) {
    SgdHyper h = hyper;
    h.weight_decay = item.weight_decay;
    slot(ctx, item.param, item.grad, item.momentum_buf, h);
  }
}

}  // namespace detail

}  // namespace cleave::ops
