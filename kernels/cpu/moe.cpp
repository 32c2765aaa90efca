// Mixture-of-experts routing kernels on the CPU (see moe.hpp): output rows shared out over the OpenMP team when the
// call is worth one (CLEAVE_PARALLEL_FOR); each output element has one writer, so no thread count changes a bit.
//
// Each loop is written once over generic vectors and compiled for the build's baseline vectors and, chosen at run
// time from the CPU (vector_isa.hpp's isa_path, as cast.cpp and gelu.cpp), for AVX2 (8 lanes) and AVX-512 (16
// lanes): a bf16 operand is widened in registers as it is loaded and a bf16 output narrowed in registers as it is
// stored (bf16_vectors.hpp: float_to_bf16's integer rounding, lane by lane), so bf16 rows move at the speed of their
// bytes rather than through per-element scalar conversion or an f32 row buffer (issue 39; the measurements:
// benchmarks/kernels/RESULTS-2026-11-30-d-moe-routing-bf16.md). Why not AVX-512 BF16's vcvtne2ps2bf16 for the
// narrowing: it flushes subnormal inputs to zero, float_to_bf16 does not; the integer rounding runs at memory speed.
// The weight gradient keeps moe.hpp's order of 4 partial sums on every path (a wider vector's products are added a
// quarter at a time) and runs 4 dots at once, so the additions' latency overlaps. No path contracts a multiply and an
// add into an FMA (fp-contract=off, as gelu.cpp), so all paths give the same bits
// (MoeKernels.EveryIsaPathGivesTheBitsOfTheScalarOrder).
#include "kernels/cpu/moe.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline): see gelu.cpp.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu {
namespace {

typedef float f32x4 __attribute__((vector_size(16)));

// Dots of the weight gradient in flight at once per thread.
constexpr int64_t kDots = 4;

template <class F>
constexpr int64_t kWidth = static_cast<int64_t>(sizeof(F) / 4);

// L values of a row as the float vector F (bf16 widened exactly), and F stored (bf16 narrowed to nearest even).
template <class F>
[[gnu::always_inline]] inline F load_row(const float* p) {
  return detail::load<F>(p);
}
template <class F>
[[gnu::always_inline]] inline F load_row(const std::uint16_t* p) {
  return detail::load_bf16<F>(p);
}
template <class F>
[[gnu::always_inline]] inline void store_row(float* p, F v) {
  detail::store(p, v);
}
template <class F>
[[gnu::always_inline]] inline void store_row(std::uint16_t* p, F v) {
  using V = detail::IntVectors<kWidth<F>>;
  const typename V::U16 half =
      detail::narrow_vec<typename V::U32, typename V::U16>(__builtin_bit_cast(typename V::U32, v));
  __builtin_memcpy(p, &half, sizeof half);
}
[[gnu::always_inline]] inline void store_one(float* p, float v) { *p = v; }
[[gnu::always_inline]] inline void store_one(std::uint16_t* p, float v) { *p = float_to_bf16(v); }

// y[:d] = s · x[:d].
template <class F, class In, class Out>
[[gnu::always_inline]] inline void gather_row(const In* x, float s, Out* y, int64_t d) {
  int64_t c = 0;
  for (; c + kWidth<F> <= d; c += kWidth<F>) store_row<F>(y + c, s * load_row<F>(x + c));
  for (; c < d; ++c) store_one(y + c, s * detail::to_f32(x[c]));
}

// y[:d] = Σ_j w_j · src[rows[j], :d] (w_j = weight[j], or 1 without weights), j in order from 0.
template <class F, class In, class Out>
[[gnu::always_inline]] inline void combine_row(const In* src, const std::int32_t* rows, const float* weight,
                                               int64_t k, Out* y, int64_t d) {
  int64_t c = 0;
  for (; c + kWidth<F> <= d; c += kWidth<F>) {
    F acc = F{};
    for (int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[j] : 1.0f;
      acc += w * load_row<F>(src + static_cast<int64_t>(rows[j]) * d + c);
    }
    store_row<F>(y + c, acc);
  }
  for (; c < d; ++c) {
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[j] : 1.0f;
      acc += w * detail::to_f32(src[static_cast<int64_t>(rows[j]) * d + c]);
    }
    store_one(y + c, acc);
  }
}

// acc += each group of 4 lanes of p, lowest first (moe.hpp's 4 partial sums, column c into lane c mod 4).
template <class F>
[[gnu::always_inline]] inline f32x4 add_quarters(f32x4 acc, F p) {
  if constexpr (kWidth<F> == 4) {
    return acc + p;
  } else if constexpr (kWidth<F> == 8) {
    acc += __builtin_shufflevector(p, p, 0, 1, 2, 3);
    return acc + __builtin_shufflevector(p, p, 4, 5, 6, 7);
  } else {
    static_assert(kWidth<F> == 16);
    acc += __builtin_shufflevector(p, p, 0, 1, 2, 3);
    acc += __builtin_shufflevector(p, p, 4, 5, 6, 7);
    acc += __builtin_shufflevector(p, p, 8, 9, 10, 11);
    return acc + __builtin_shufflevector(p, p, 12, 13, 14, 15);
  }
}

// dweight[i] for i in [first, first + count), count <= kDots: kDots dots side by side (the unused ones repeat the
// first and are not stored), each in moe.hpp's order.
template <class F, class Dy, class Src>
[[gnu::always_inline]] inline void dot_group(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                                             int64_t first, int64_t count, int64_t k, int64_t d) {
  const Dy* g[kDots];
  const Src* s[kDots];
  f32x4 acc[kDots];
  for (int64_t q = 0; q < kDots; ++q) {
    const int64_t i = first + (q < count ? q : 0);
    g[q] = dy + (i / k) * d;
    s[q] = src + static_cast<int64_t>(rows[i]) * d;
    acc[q] = f32x4{};
  }
  int64_t c = 0;
  for (; c + kWidth<F> <= d; c += kWidth<F>) {
#pragma GCC unroll 4
    for (int64_t q = 0; q < kDots; ++q) acc[q] = add_quarters(acc[q], load_row<F>(g[q] + c) * load_row<F>(s[q] + c));
  }
  for (; c + 4 <= d; c += 4) {
#pragma GCC unroll 4
    for (int64_t q = 0; q < kDots; ++q) acc[q] += load_row<f32x4>(g[q] + c) * load_row<f32x4>(s[q] + c);
  }
  for (int64_t q = 0; q < count; ++q) {
    float sum = 0.0f;
    for (int l = 0; l < 4; ++l) sum += acc[q][l];
    for (int64_t t = c; t < d; ++t) sum += detail::to_f32(g[q][t]) * detail::to_f32(s[q][t]);
    dweight[first + q] = sum;
  }
}

// The loops are spelled out per path (a macro, not a template over the path) because OpenMP outlines a parallel
// region into a function that takes the target of the function it is written in (gelu.cpp).
#define CLEAVE_MOE_PATH(suffix, F, ...)                                                                         \
  template <class In, class Out>                                                                                \
  __VA_ARGS__ void gather_##suffix(const In* x, const std::int32_t* index, const float* scale, Out* out,        \
                                   int64_t rows, int64_t d) {                                                   \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * d),                                              \
      gather_row<F>(x + static_cast<int64_t>(index[r]) * d, scale != nullptr ? scale[r] : 1.0f, out + r * d, d);) \
  }                                                                                                             \
  template <class In, class Out>                                                                                \
  __VA_ARGS__ void combine_##suffix(const In* src, const std::int32_t* rows, const float* weight, Out* out,     \
                                    int64_t tokens, int64_t k, int64_t d) {                                     \
    CLEAVE_PARALLEL_FOR(n, tokens, detail::worth_parallel(tokens * k * d),                                      \
      combine_row<F>(src, rows + n * k, weight != nullptr ? weight + n * k : nullptr, k, out + n * d, d);)      \
  }                                                                                                             \
  template <class Dy, class Src>                                                                                \
  __VA_ARGS__ void weight_grad_##suffix(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight, \
                                        int64_t tokens, int64_t k, int64_t d) {                                 \
    const int64_t dots = tokens * k, groups = (dots + kDots - 1) / kDots;                                       \
    CLEAVE_PARALLEL_FOR(b, groups, detail::worth_parallel(dots * d),                                            \
      dot_group<F>(dy, src, rows, dweight, b * kDots, std::min(kDots, dots - b * kDots), k, d);)                \
  }

CLEAVE_MOE_PATH(baseline, f32x4, __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_MOE_PATH(avx2, detail::f32x8, __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_MOE_PATH(avx512, detail::f32x16, __attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off"))))
#define CLEAVE_MOE_PATHS(name, ...) name##_baseline<__VA_ARGS__>, name##_avx2<__VA_ARGS__>, name##_avx512<__VA_ARGS__>
#else
#define CLEAVE_MOE_PATHS(name, ...) name##_baseline<__VA_ARGS__>, name##_baseline<__VA_ARGS__>, name##_baseline<__VA_ARGS__>
#endif
#undef CLEAVE_MOE_PATH

// Every index in [0, limit), checked in one pass that vectorises (as unsigned, a negative index is above any limit);
// the first one outside named when one is.
void check_indices(const std::int32_t* index, int64_t count, int64_t limit, const char* op, const char* name) {
  std::uint32_t highest = 0;
  for (int64_t i = 0; i < count; ++i) highest = std::max(highest, static_cast<std::uint32_t>(index[i]));
  if (count == 0 || static_cast<int64_t>(highest) < limit) return;
  for (int64_t i = 0; i < count; ++i) {
    CLEAVE_ASSERT(index[i] >= 0 && index[i] < limit, "{}: {}[{}] = {} is outside [0, {})", op, name, i, index[i],
                  limit);
  }
}

// The gather without a scale between rows of one dtype: the rows' bytes.
template <class T>
void copy_rows(const T* x, const std::int32_t* index, T* out, int64_t rows, int64_t d) {
  const std::size_t bytes = static_cast<std::size_t>(d) * sizeof(T);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * d),
    std::memcpy(out + r * d, x + static_cast<int64_t>(index[r]) * d, bytes);)
}

// The widest path, chosen once per process (the CPU does not change).
VectorIsa widest() {
  static const VectorIsa isa = best_vector_isa();
  return isa;
}

}  // namespace

template <typename In, typename Out>
void moe_gather_isa(VectorIsa isa, const In* x, const std::int32_t* index, const float* scale, Out* out,
                    std::int64_t rows, std::int64_t n_tokens, std::int64_t d) {
  check_indices(index, rows, n_tokens, "moe_gather", "index");
  const auto path = isa_path(isa, "moe_gather", CLEAVE_MOE_PATHS(gather, In, Out));
  if constexpr (std::is_same_v<In, Out>) {
    if (scale == nullptr) return copy_rows(x, index, out, rows, d);
  }
  path(x, index, scale, out, rows, d);
}

template <typename In, typename Out>
void moe_combine_isa(VectorIsa isa, const In* src, const std::int32_t* rows, const float* weight, Out* out,
                     std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  check_indices(rows, tokens * k, n_rows, "moe_combine", "rows");
  isa_path(isa, "moe_combine", CLEAVE_MOE_PATHS(combine, In, Out))(src, rows, weight, out, tokens, k, d);
}

template <typename Dy, typename Src>
void moe_combine_weight_grad_isa(VectorIsa isa, const Dy* dy, const Src* src, const std::int32_t* rows,
                                 float* dweight, std::int64_t tokens, std::int64_t k, std::int64_t n_rows,
                                 std::int64_t d) {
  check_indices(rows, tokens * k, n_rows, "moe_combine_weight_grad", "rows");
  isa_path(isa, "moe_combine_weight_grad", CLEAVE_MOE_PATHS(weight_grad, Dy, Src))(dy, src, rows, dweight, tokens, k,
                                                                                  d);
}

template <typename In, typename Out>
void moe_gather(const In* x, const std::int32_t* index, const float* scale, Out* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d) {
  moe_gather_isa(widest(), x, index, scale, out, rows, n_tokens, d);
}

template <typename In, typename Out>
void moe_combine(const In* src, const std::int32_t* rows, const float* weight, Out* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  moe_combine_isa(widest(), src, rows, weight, out, tokens, k, n_rows, d);
}

template <typename Dy, typename Src>
void moe_combine_weight_grad(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  moe_combine_weight_grad_isa(widest(), dy, src, rows, dweight, tokens, k, n_rows, d);
}

#undef CLEAVE_MOE_PATHS

#define CLEAVE_MOE_KERNELS(A, B)                                                                                   \
  template void moe_gather<A, B>(const A*, const std::int32_t*, const float*, B*, std::int64_t, std::int64_t,     \
                                 std::int64_t);                                                                    \
  template void moe_combine<A, B>(const A*, const std::int32_t*, const float*, B*, std::int64_t, std::int64_t,    \
                                  std::int64_t, std::int64_t);                                                     \
  template void moe_combine_weight_grad<A, B>(const A*, const B*, const std::int32_t*, float*, std::int64_t,      \
                                              std::int64_t, std::int64_t, std::int64_t);                           \
  template void moe_gather_isa<A, B>(VectorIsa, const A*, const std::int32_t*, const float*, B*, std::int64_t,    \
                                     std::int64_t, std::int64_t);                                                  \
  template void moe_combine_isa<A, B>(VectorIsa, const A*, const std::int32_t*, const float*, B*, std::int64_t,   \
                                      std::int64_t, std::int64_t, std::int64_t);                                   \
  template void moe_combine_weight_grad_isa<A, B>(VectorIsa, const A*, const B*, const std::int32_t*, float*,     \
                                                  std::int64_t, std::int64_t, std::int64_t, std::int64_t);
CLEAVE_MOE_KERNELS(float, float)
CLEAVE_MOE_KERNELS(float, std::uint16_t)
CLEAVE_MOE_KERNELS(std::uint16_t, float)
CLEAVE_MOE_KERNELS(std::uint16_t, std::uint16_t)
#undef CLEAVE_MOE_KERNELS

}  // namespace cleave::kernels::cpu
