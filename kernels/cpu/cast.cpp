// f32 <-> bf16 conversion (see cast.hpp). Each loop body is written once over generic integer vectors and
// compiled for the build's baseline vectors and, chosen at run time from the CPU, for AVX2 (8 lanes) and
// AVX-512 (16 lanes) as gelu.cpp does: under bf16 mixed precision every CPU kernel widens its bf16 inputs and
// narrows its outputs (ops/cpu_f32_view.hpp), so these loops run on every activation, several times a step.
// Every path performs cleave::float_to_bf16's integer arithmetic (round to nearest even, NaN kept quiet NaN)
// lane by lane, so all paths give the same bits (KernelCast.EveryIsaPathGivesTheSameBits).
#include "kernels/cpu/cast.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline): see gelu.cpp.
#pragma GCC diagnostic ignored "-Wpsabi"

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {
namespace {

using detail::narrow_range;
using detail::u16x16;
using detail::u16x4;
using detail::u16x8;
using detail::u32x16;
using detail::u32x4;
using detail::u32x8;
using detail::widen_range;

// Work per OpenMP thread: contiguous blocks of a multiple of 16 elements, so the threads' ranges never split a
// vector and the bits do not depend on the thread count (they would not anyway: every element is independent).
constexpr int64_t kBlock = 4096;

// The loops are spelled out per path because OpenMP outlines a parallel region into a function that takes the
// target of the function it is written in (gelu.cpp).
#define CLEAVE_CAST_PATH(suffix, target_attr, U32, U16)                                              \
  target_attr void narrow_##suffix(const float* x, std::uint16_t* y, int64_t n) {                    \
    const int64_t blocks = (n + kBlock - 1) / kBlock;                                                \
    CLEAVE_PARALLEL_FOR(b, blocks, detail::worth_parallel_streaming(n),                              \
      narrow_range<U32, U16>(x, y, b * kBlock, b == blocks - 1 ? n : (b + 1) * kBlock);)             \
  }                                                                                                  \
  target_attr void widen_##suffix(const std::uint16_t* x, float* y, int64_t n) {                     \
    const int64_t blocks = (n + kBlock - 1) / kBlock;                                                \
    CLEAVE_PARALLEL_FOR(b, blocks, detail::worth_parallel_streaming(n),                              \
      widen_range<U32, U16>(x, y, b * kBlock, b == blocks - 1 ? n : (b + 1) * kBlock);)              \
  }                                                                                                  \
  target_attr void narrow_serial_##suffix(const float* x, std::uint16_t* y, int64_t n) {             \
    narrow_range<U32, U16>(x, y, 0, n);                                                              \
  }                                                                                                  \
  target_attr void widen_serial_##suffix(const std::uint16_t* x, float* y, int64_t n) {              \
    widen_range<U32, U16>(x, y, 0, n);                                                               \
  }                                                                                                  \
  target_attr void narrow_rows_##suffix(const float* x, int64_t ldx, std::uint16_t* y, int64_t ldy,  \
                                        int64_t rows, int64_t n) {                                   \
    for (int64_t r = 0; r < rows; ++r) narrow_range<U32, U16>(x + r * ldx, y + r * ldy, 0, n);       \
  }

CLEAVE_CAST_PATH(baseline, , u32x4, u16x4)
#if defined(__x86_64__)
CLEAVE_CAST_PATH(avx2, __attribute__((target("avx2"))), u32x8, u16x8)
CLEAVE_CAST_PATH(avx512, __attribute__((target("avx512f,avx512bw"))), u32x16, u16x16)
#endif
#undef CLEAVE_CAST_PATH

}  // namespace

void cast_f32_to_bf16_isa(VectorIsa isa, const float* x, std::uint16_t* y, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "cast_f32_to_bf16: negative size {}", n);
  isa_path(isa, "cast_f32_to_bf16", CLEAVE_ISA_PATHS(narrow))(x, y, n);
}

void cast_bf16_to_f32_isa(VectorIsa isa, const std::uint16_t* x, float* y, int64_t n) {
  CLEAVE_ASSERT(n >= 0, "cast_bf16_to_f32: negative size {}", n);
  isa_path(isa, "cast_bf16_to_f32", CLEAVE_ISA_PATHS(widen))(x, y, n);
}

void cast_f32_to_bf16(const float* x, std::uint16_t* y, int64_t n) {
  static const VectorIsa isa = best_vector_isa();  // fixed per process: the CPU does not change
  cast_f32_to_bf16_isa(isa, x, y, n);
}

void cast_bf16_to_f32(const std::uint16_t* x, float* y, int64_t n) {
  static const VectorIsa isa = best_vector_isa();
  cast_bf16_to_f32_isa(isa, x, y, n);
}

// Called per row or block: the path is chosen once per process.
void cast_f32_to_bf16_serial(const float* x, std::uint16_t* y, int64_t n) {
  static const auto path = isa_path(best_vector_isa(), "cast_f32_to_bf16_serial", CLEAVE_ISA_PATHS(narrow_serial));
  path(x, y, n);
}

void cast_bf16_to_f32_serial(const std::uint16_t* x, float* y, int64_t n) {
  static const auto path = isa_path(best_vector_isa(), "cast_bf16_to_f32_serial", CLEAVE_ISA_PATHS(widen_serial));
  path(x, y, n);
}

void cast_f32_to_bf16_rows_isa(VectorIsa isa, const float* x, int64_t ldx, std::uint16_t* y, int64_t ldy,
                               int64_t rows, int64_t n) {
  CLEAVE_ASSERT(rows >= 0 && n >= 0 && ldx >= n && ldy >= n,
                "cast_f32_to_bf16_rows: rows {} of {} values, row strides {} and {}", rows, n, ldx, ldy);
  isa_path(isa, "cast_f32_to_bf16_rows", CLEAVE_ISA_PATHS(narrow_rows))(x, ldx, y, ldy, rows, n);
}

// Called per block of rows: the path is chosen once per process, the per-call work (the path's constants) once per
// block rather than per row.
void cast_f32_to_bf16_rows_serial(const float* x, int64_t ldx, std::uint16_t* y, int64_t ldy, int64_t rows,
                                  int64_t n) {
  static const auto path = isa_path(best_vector_isa(), "cast_f32_to_bf16_rows_serial", CLEAVE_ISA_PATHS(narrow_rows));
  path(x, ldx, y, ldy, rows, n);
}

}  // namespace cleave::kernels::cpu
