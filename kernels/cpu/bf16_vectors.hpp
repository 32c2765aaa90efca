// Internal: f32 <-> bf16 conversion of a range of elements over generic integer vectors, for the kernels that
// convert inside their own vectorised loops (cast.cpp's whole-tensor casts, rope.cpp's per-row bf16 path, the
// weight gradients' loads: bias.cpp, layernorm.cpp, rmsnorm.cpp).
//
// Invariant: narrowing is cleave::float_to_bf16 lane by lane (round to nearest even, NaN kept as a quiet NaN),
// widening is exact, whatever the vector type the caller compiles them for (U32 x n lanes with U16 of the same
// lane count; always_inline, so a wide vector never crosses a call boundary and they take the caller's target):
// every path and every range split gives the same bits (KernelCast.EveryIsaPathGivesTheSameBits).
#pragma once

#include <cstdint>

#include "engine/core/dtype.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu::detail {

typedef std::uint32_t u32x4 __attribute__((vector_size(16)));
typedef std::uint16_t u16x4 __attribute__((vector_size(8)));
typedef std::uint32_t u32x8 __attribute__((vector_size(32)));
typedef std::uint16_t u16x8 __attribute__((vector_size(16)));
typedef std::uint32_t u32x16 __attribute__((vector_size(64)));
typedef std::uint16_t u16x16 __attribute__((vector_size(32)));

// float_to_bf16 on every lane: NaN -> its top half with the quiet bit set; else round to nearest even.
template <class U32, class U16>
[[gnu::always_inline]] inline U16 narrow_vec(U32 bits) {
  const U32 nan = (bits & 0x7fffffffu) > 0x7f800000u;  // all ones where NaN
  const U32 rounded = (bits + (0x7fffu + ((bits >> 16) & 1u))) >> 16;
  const U32 quiet = (bits >> 16) | 0x40u;
  return __builtin_convertvector((quiet & nan) | (rounded & ~nan), U16);
}

template <class U32, class U16>
[[gnu::always_inline]] inline U32 widen_vec(U16 half) {
  return __builtin_convertvector(half, U32) << 16;
}

// y[begin, end) = bf16(x[begin, end)).
template <class U32, class U16>
[[gnu::always_inline]] inline void narrow_range(const float* x, std::uint16_t* y, int64_t begin, int64_t end) {
  constexpr int64_t lanes = sizeof(U32) / 4;
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) {
    U32 bits;
    __builtin_memcpy(&bits, x + i, sizeof bits);
    const U16 out = narrow_vec<U32, U16>(bits);
    __builtin_memcpy(y + i, &out, sizeof out);
  }
  for (; i < end; ++i) y[i] = float_to_bf16(x[i]);
}

// y[begin, end) = f32(x[begin, end)), exactly.
template <class U32, class U16>
[[gnu::always_inline]] inline void widen_range(const std::uint16_t* x, float* y, int64_t begin, int64_t end) {
  constexpr int64_t lanes = sizeof(U32) / 4;
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) {
    U16 half;
    __builtin_memcpy(&half, x + i, sizeof half);
    const U32 out = widen_vec<U32, U16>(half);
    __builtin_memcpy(y + i, &out, sizeof out);
  }
  for (; i < end; ++i) y[i] = bf16_to_float(x[i]);
}

// One element as f32, for loops that read f32 or bf16 rows alike (the weight gradients: bias.cpp, layernorm.cpp):
// the widening inside the loop, which the compiler vectorises with the arithmetic.
[[gnu::always_inline]] inline float to_f32(float x) { return x; }
[[gnu::always_inline]] inline float to_f32(std::uint16_t x) { return __builtin_bit_cast(float, std::uint32_t{x} << 16); }

// The integer vectors of L lanes (the float vector of L lanes' bf16 load).
template <int64_t L>
struct IntVectors;
template <>
struct IntVectors<4> {
  using U16 = u16x4;
  using U32 = u32x4;
};
template <>
struct IntVectors<8> {
  using U16 = u16x8;
  using U32 = u32x8;
};
template <>
struct IntVectors<16> {
  using U16 = u16x16;
  using U32 = u32x16;
};

// The float vector F loaded from L bf16 values (exact), for the kernels written over generic vectors (rmsnorm.cpp).
template <class F>
[[gnu::always_inline]] inline F load_bf16(const std::uint16_t* p) {
  using V = IntVectors<static_cast<int64_t>(sizeof(F) / 4)>;
  typename V::U16 half;
  __builtin_memcpy(&half, p, sizeof half);
  return __builtin_bit_cast(F, widen_vec<typename V::U32, typename V::U16>(half));
}

// F loaded from f32 values, or widened from bf16 bits as it is loaded (exact): the weight gradients' row loads,
// written once for both operand dtypes (bias.cpp, layernorm.cpp, rmsnorm.cpp).
template <class F>
[[gnu::always_inline]] inline F load_as_f32(const float* p) {
  return load<F>(p);
}
template <class F>
[[gnu::always_inline]] inline F load_as_f32(const std::uint16_t* p) {
  return load_bf16<F>(p);
}

}  // namespace cleave::kernels::cpu::detail
