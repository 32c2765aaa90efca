// f32 <-> bf16 conversion for the mixed-precision path: bf16 values are stored as their 16-bit patterns
// (uint16_t). Narrowing rounds to nearest even (cleave::float_to_bf16, NaN stays NaN); widening is exact.
//
// Invariant: every function touches exactly n elements, in any order (the result does not depend on threads),
// and every vector path (vector_isa.hpp) gives cleave::float_to_bf16's bits.
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

void cast_f32_to_bf16(const float* x, std::uint16_t* y, int64_t n);
void cast_bf16_to_f32(const std::uint16_t* x, float* y, int64_t n);

// The same on the calling thread alone (never an OpenMP team), for kernels that convert a row or a block at a
// time inside their own loops (cross_entropy.cpp, flash_attention.cpp). Same bits as the two above.
void cast_f32_to_bf16_serial(const float* x, std::uint16_t* y, int64_t n);
void cast_bf16_to_f32_serial(const std::uint16_t* x, float* y, int64_t n);

// rows rows of n values (row strides ldx and ldy, in elements) narrowed as cast_f32_to_bf16_serial narrows them, one
// call for a block (flash_attention's output and gradient rows); the elements between rows untouched.
void cast_f32_to_bf16_rows_serial(const float* x, int64_t ldx, std::uint16_t* y, int64_t ldy, int64_t rows,
                                  int64_t n);

// One vector path; the two above run the widest. For tests and benchmarks.
void cast_f32_to_bf16_isa(VectorIsa isa, const float* x, std::uint16_t* y, int64_t n);
void cast_bf16_to_f32_isa(VectorIsa isa, const std::uint16_t* x, float* y, int64_t n);
void cast_f32_to_bf16_rows_isa(VectorIsa isa, const float* x, int64_t ldx, std::uint16_t* y, int64_t ldy,
                               int64_t rows, int64_t n);

}  // namespace cleave::kernels::cpu
