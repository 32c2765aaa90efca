// The ops the gradient bucketer (gradient_bucketer.hpp) runs on its buffers: zero, copy, cast and scale, through
// the op seam on the bucketer's stream, so buckets may live on a device. The context carries only device,
// allocator and stream (these ops need no per-device resources).
//
// Invariant: on the CPU these ops are the host loops they replace, bit for bit (the same float_to_bf16 rounding,
// the same f32 product); f16 has no seam op and stays on host buffers (the bucketer refuses f16 on a device).
#pragma once

#include "engine/core/allocator.hpp"
#include "engine/core/stream.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::ops {
struct Context;  // kernels/ops/context.hpp: engine/comm's headers include nothing of kernels/ops
}

namespace cleave::comm::detail {

ops::Context bucket_ops_context(Allocator& allocator, const Stream& stream);

// dst := src element by element between floating dtypes (f32 in between: exact widening, nearest-even rounding).
void convert(const ops::Context& ctx, const Tensor& src, const Tensor& dst);

// t *= factor (f32 arithmetic, one rounding for bf16).
void scale(const ops::Context& ctx, const Tensor& t, float factor);

}  // namespace cleave::comm::detail
