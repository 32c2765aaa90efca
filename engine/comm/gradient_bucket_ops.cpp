// The gradient bucketer's ops on its buffers (gradient_bucket_ops.hpp): the op seam for f32 and bf16, the host
// loops of host_reduce.hpp for f16. Invariant: the same rounding and products as the host loops, bit for bit.
#include "engine/comm/gradient_bucket_ops.hpp"

#include "engine/comm/host_reduce.hpp"
#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::comm::detail {
namespace {

bool seam_dtype(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

}  // namespace

ops::Context bucket_ops_context(Allocator& allocator, const Stream& stream) {
  ops::Context ctx;
  ctx.device = allocator.device();
  ctx.allocator = &allocator;
  ctx.stream = &stream;
  return ctx;
}

// f16 has no seam op: host buffers only (the constructor refuses f16 on a device).
void convert(const ops::Context& ctx, const Tensor& src, const Tensor& dst) {
  if (seam_dtype(src.dtype()) && seam_dtype(dst.dtype())) return ops::copy(ctx, src, dst);
  CLEAVE_ASSERT(ctx.device.is_cpu(), "gradient bucketer: converting {} to {} on {}", dtype_name(src.dtype()),
                dtype_name(dst.dtype()), ctx.device.str());
  if (src.dtype() == DType::kF32) {
    narrow_from_f32(static_cast<const float*>(src.raw_data()), dst.dtype(), dst.raw_data(), src.numel());
  } else {
    CLEAVE_ASSERT(dst.dtype() == DType::kF32, "gradient bucketer: converting {} to {}", dtype_name(src.dtype()),
                  dtype_name(dst.dtype()));
    widen_to_f32(src.raw_data(), src.dtype(), static_cast<float*>(dst.raw_data()), src.numel());
  }
}

// t *= factor (f32 arithmetic, one rounding for bf16).
void scale(const ops::Context& ctx, const Tensor& t, float factor) {
  if (seam_dtype(t.dtype())) return ops::scale_inplace(ctx, t, factor);
  CLEAVE_ASSERT(ctx.device.is_cpu(), "gradient bucketer: scaling {} on {}", dtype_name(t.dtype()), ctx.device.str());
  scale_in_place(t.raw_data(), t.dtype(), factor, t.numel());
}

}  // namespace cleave::comm::detail
