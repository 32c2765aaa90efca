// The CPU backend's mixture-of-experts routing slots (contracts in ops.hpp "Mixture of experts"; checks in
// ops_moe.cpp): gather the routed rows (optionally scaled), combine expert outputs back into token order with their
// router weights, and the router weights' gradient. The grouped GEMMs need no slot of their own: ops_moe.cpp runs
// them through the gemm slot. Invariant: f32 views (cpu_f32_view.hpp), so bf16 tensors give the f32 kernel's bits
// on the rounded inputs; a missing scale or weight means 1.
#include <cstdint>

#include "kernels/cpu/moe.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_f32_view.hpp"

namespace cleave::ops::cpu_detail {

void moe_gather(const Context& ctx, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out) {
  F32In in(ctx, x);
  F32Out o(ctx, out, false);
  kc::moe_gather(in.get(), index.data<std::int32_t>(), scale.defined() ? scale.data<float>() : nullptr, o.get(),
                 index.numel(), x.numel() / x.shape().last(), x.shape().last());
}

void moe_combine(const Context& ctx, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out) {
  F32In in(ctx, src);
  F32Out o(ctx, out, false);
  kc::moe_combine(in.get(), rows.data<std::int32_t>(), weight.defined() ? weight.data<float>() : nullptr, o.get(),
                  rows.dim(0), rows.dim(1), src.numel() / src.shape().last(), src.shape().last());
}

void moe_combine_weight_grad(const Context& ctx, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight) {
  F32In g(ctx, dy), in(ctx, src);
  kc::moe_combine_weight_grad(g.get(), in.get(), rows.data<std::int32_t>(), dweight.data<float>(), rows.dim(0),
                              rows.dim(1), src.numel() / src.shape().last(), src.shape().last());
}

}  // namespace cleave::ops::cpu_detail
