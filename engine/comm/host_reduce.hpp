// Host-side element loops used by the communication backends: widening bf16/f16 to f32 and back (a
// reduction of 16-bit floats is carried in f32 and rounded once), the rank-ordered reduction of
// deterministic mode, and in-place scaling of gradient buckets.
//
// Invariant: ordered_reduce combines slots 0..n-1 of every element in the canonical order of
// engine/core/sum_tree.hpp (the plain left-to-right sum for n <= 3; ((s0+s1)+(s2+s3)) for n = 4), accumulating
// in f32 for f32/bf16/f16 and in the element type for integers (wrapping), so its result depends on nothing
// but the inputs and their order, and a rank's canonically summed micro-batches reduce to what one rank
// summing all of them gets. max propagates NaN and keeps the earliest of equal values (+0 vs -0).
#pragma once

#include <cstdint>
#include <span>

#include "engine/comm/communicator.hpp"
#include "engine/core/dtype.hpp"

namespace cleave::comm {

float f16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float value);  // round to nearest even

// True for f32, bf16 and f16.
bool is_floating(DType dtype);

// dst[i] = float(src[i]) for a bf16 or f16 (or f32) source.
void widen_to_f32(const void* src, DType dtype, float* dst, std::int64_t count);
// dst[i] = round(src[i]) into bf16 or f16 (or a plain copy for f32).
void narrow_from_f32(const float* src, DType dtype, void* dst, std::int64_t count);

// out[i] = op over slots[0][i], ..., slots[n-1][i] in the canonical tree order. `out` may alias one slot.
void ordered_reduce(DType dtype, ReduceOp op, std::span<const void* const> slots, void* out, std::int64_t count);

// data[i] *= factor for f32/bf16/f16 (16-bit types: computed in f32, rounded once).
void scale_in_place(void* data, DType dtype, float factor, std::int64_t count);

}  // namespace cleave::comm
