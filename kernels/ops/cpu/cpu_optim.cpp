// The CPU backend's optimizer slots (contracts in ops.hpp; checks in ops_optim.cpp): AdamW and SGD with momentum,
// per tensor and multi-tensor. Parameters and optimizer state are f32 and updated in place; a bf16 gradient is
// widened whole (cpu_f32_view.hpp). Invariant: a multi-tensor update runs all items in one OpenMP team and gives,
// bit for bit, the single-tensor update of each item in turn (adamw.hpp, sgd.hpp).
#include <cstdint>
#include <span>

#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/sgd.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu/scratch_table.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

void adamw_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWHyper& h) {
  F32In g(ctx, grad);
  kc::adamw_update(param.data<float>(), g.get(), m.data<float>(), v.data<float>(), param.numel(), h.lr, h.beta1,
                   h.beta2, h.eps, h.weight_decay, h.step);
}

void sgd_update(const Context& ctx, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                const SgdHyper& h) {
  F32In g(ctx, grad);
  kc::sgd_update(param.data<float>(), g.get(), momentum_buf.defined() ? momentum_buf.data<float>() : nullptr,
                 param.numel(), h.lr, h.momentum, h.weight_decay, h.nesterov, h.first_step);
}

// All items in one kernel call (one OpenMP team; adamw.hpp, sgd.hpp), their list in the run's scratch (no allocation
// in a steady state). A bf16 grad is widened whole, as above.
void adamw_update_many(const Context& ctx, std::span<const AdamWItem> items, const AdamWHyper& h) {
  F32Inputs grads(ctx);
  ScratchTable<kc::AdamWTensor> tensors(ctx, items.size());
  for (const AdamWItem& item : items) {
    tensors.push_back({item.param.data<float>(), grads.view(item.grad), item.m.data<float>(), item.v.data<float>(),
                       item.param.numel(), item.weight_decay});
  }
  kc::adamw_update_many(tensors.data(), tensors.size(), h.lr, h.beta1, h.beta2, h.eps,
                        h.step);
}

void sgd_update_many(const Context& ctx, std::span<const SgdItem> items, const SgdHyper& h) {
  F32Inputs grads(ctx);
  ScratchTable<kc::SgdTensor> tensors(ctx, items.size());
  for (const SgdItem& item : items) {
    tensors.push_back({item.param.data<float>(), grads.view(item.grad),
                       item.momentum_buf.defined() ? item.momentum_buf.data<float>() : nullptr, item.param.numel(),
                       item.weight_decay});
  }
  kc::sgd_update_many(tensors.data(), tensors.size(), h.lr, h.momentum, h.nesterov,
                      h.first_step);
}

}  // namespace cleave::ops::cpu_detail
