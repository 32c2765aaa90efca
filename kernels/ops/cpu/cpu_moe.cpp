// The CPU backend's mixture-of-experts routing slots (contracts in ops.hpp "Mixture of experts"; checks in
// ops_moe.cpp): gather the routed rows (optionally scaled), combine expert outputs back into token order with their
// router weights, and the router weights' gradient. The grouped GEMMs are cpu_grouped_gemm.cpp's. Invariant: the
// kernels read and write f32 or bf16 tensors in place, converting in registers (kernels/cpu/moe.hpp: the bits of
// the f32 kernel on the widened inputs, each output narrowed once), with no buffer of their own; a missing scale or
// weight means 1.
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/moe.hpp"
#include "kernels/ops/cpu/cpu_slots.hpp"
#include "kernels/ops/cpu_f32_view.hpp"  // bf16_data

namespace cleave::ops::cpu_detail {
namespace {

// f(x, y) with x the data of a and y of b, each float* or std::uint16_t* (bf16 bit patterns) by its dtype.
template <typename F>
void by_dtypes(const Tensor& a, const Tensor& b, F&& f) {
  const bool a16 = a.dtype() == DType::kBF16, b16 = b.dtype() == DType::kBF16;
  if (!a16 && !b16) {
    f(a.data<float>(), b.data<float>());
  } else if (!a16) {
    f(a.data<float>(), bf16_data(b));
  } else if (!b16) {
    f(bf16_data(a), b.data<float>());
  } else {
    f(bf16_data(a), bf16_data(b));
  }
}

}  // namespace

void moe_gather(const Context&, const Tensor& x, const Tensor& index, const Tensor& scale, const Tensor& out) {
  by_dtypes(x, out, [&](auto in, auto o) {
    kc::moe_gather(in, index.data<std::int32_t>(), scale.defined() ? scale.data<float>() : nullptr, o, index.numel(),
                   x.numel() / x.shape().last(), x.shape().last());
  });
}

void moe_combine(const Context&, const Tensor& src, const Tensor& rows, const Tensor& weight, const Tensor& out) {
  by_dtypes(src, out, [&](auto in, auto o) {
    kc::moe_combine(in, rows.data<std::int32_t>(), weight.defined() ? weight.data<float>() : nullptr, o, rows.dim(0),
                    rows.dim(1), src.numel() / src.shape().last(), src.shape().last());
  });
}

void moe_combine_weight_grad(const Context&, const Tensor& dy, const Tensor& src, const Tensor& rows,
                             const Tensor& dweight) {
  by_dtypes(dy, src, [&](auto g, auto in) {
    kc::moe_combine_weight_grad(g, in, rows.data<std::int32_t>(), dweight.data<float>(), rows.dim(0), rows.dim(1),
                                src.numel() / src.shape().last(), src.shape().last());
  });
}

}  // namespace cleave::ops::cpu_detail
