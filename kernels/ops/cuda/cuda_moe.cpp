// The CUDA backend's mixture-of-experts routing slots (contracts in ops.hpp "Mixture of experts") over
// kernels/cuda/moe: floating tensors are f32 or bf16 views, index tensors i32, weights f32 (the seam checked
// them). The grouped GEMMs need no slot: the seam runs them through the gemm slot. Compiled, not run on a GPU
// (tests/gpu/ops/moe_parity_test.cpp compares each slot with the CPU backend's).
#include "kernels/cuda/moe.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops::cuda_detail {
namespace {

kd::ConstFloats in(const Tensor& t) { return kd::ConstFloats(t.raw_data(), float_type(t)); }
kd::Floats out(const Tensor& t) { return kd::Floats(t.raw_data(), float_type(t)); }

}  // namespace

void moe_gather(const Context& ctx, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& o) {
  kd::moe_gather(in(x), index.data<std::int32_t>(), scale.defined() ? scale.data<float>() : nullptr, out(o),
                 index.numel(), x.shape().last(), stream_of(ctx));
}

void moe_combine(const Context& ctx, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& o) {
  kd::moe_combine(in(src), rows.data<std::int32_t>(), weight.defined() ? weight.data<float>() : nullptr, out(o),
                  rows.dim(0), rows.dim(1), src.shape().last(), stream_of(ctx));
}

void moe_combine_weight_grad(const Context& ctx, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight) {
  kd::moe_combine_weight_grad(in(dy), in(src), rows.data<std::int32_t>(), dweight.data<float>(), rows.dim(0),
                              rows.dim(1), src.shape().last(), stream_of(ctx));
}

}  // namespace cleave::ops::cuda_detail
