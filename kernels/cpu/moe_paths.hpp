// Internal to moe.cpp: the routing kernels' loops over one float vector type, included once per vector path inside
// that path's namespace and `#pragma GCC target` region (so every function here, the OpenMP regions' outlined
// bodies included, takes the path's instruction set). No include guard, on purpose. The includer defines before it:
//   F                    the path's float vector (the build's f32xN baseline, f32x8 AVX2, f32x16 AVX-512), at least
//                        as wide as the weight gradient's Partials (f32xN);
//   CLEAVE_MOE_BF16_INSN (optional) narrow with AVX-512 BF16's vcvtneps2bf16 instead of the integer rounding.
// Invariant: every path gives moe.hpp's bits. vcvtneps2bf16 rounds as float_to_bf16 does (to nearest even, NaN to
// the quiet NaN of its top half) except that it flushes a subnormal input to zero: a vector holding one takes the
// integer rounding instead (never in practice; MoeKernels' inputs hold subnormals so the test sees both).

constexpr int64_t kWidth = static_cast<int64_t>(sizeof(F) / 4);

// kWidth values of a row as F (bf16 widened exactly), and F stored (bf16 narrowed to nearest even).
[[gnu::always_inline]] inline F load_row(const float* p) { return detail::load<F>(p); }
[[gnu::always_inline]] inline F load_row(const std::uint16_t* p) { return detail::load_bf16<F>(p); }
[[gnu::always_inline]] inline void store_row(float* p, F v) { detail::store(p, v); }
[[gnu::always_inline]] inline void store_row(std::uint16_t* p, F v) {
  using V = detail::IntVectors<kWidth>;
  const auto bits = __builtin_bit_cast(typename V::U32, v);
#if defined(CLEAVE_MOE_BF16_INSN)
  const __m512i i = __builtin_bit_cast(__m512i, bits);
  const __mmask16 subnormal = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(i, _mm512_set1_epi32(0x7f800000)),
                                                          i, _mm512_set1_epi32(0x007fffff));
  if (__builtin_expect(subnormal == 0, 1)) {
    const __m256bh half = _mm512_cvtneps_pbh(__builtin_bit_cast(__m512, v));
    __builtin_memcpy(p, &half, sizeof half);
    return;
  }
#endif
  const typename V::U16 half = detail::narrow_vec<typename V::U32, typename V::U16>(bits);
  __builtin_memcpy(p, &half, sizeof half);
}
[[gnu::always_inline]] inline void store_one(float* p, float v) { *p = v; }
[[gnu::always_inline]] inline void store_one(std::uint16_t* p, float v) { *p = float_to_bf16(v); }

// y[:d] = s · x[:d].
template <class In, class Out>
[[gnu::always_inline]] inline void gather_row(const In* x, float s, Out* y, int64_t d) {
  int64_t c = 0;
  for (; c + kWidth <= d; c += kWidth) store_row(y + c, s * load_row(x + c));
  for (; c < d; ++c) store_one(y + c, s * detail::to_f32(x[c]));
}

// y[:d] = Σ_j w_j · src[rows[j], :d] (w_j = weight[j], or 1 without weights), j in order from 0.
template <class In, class Out>
[[gnu::always_inline]] inline void combine_row(const In* src, const std::int32_t* rows, const float* weight, int64_t k,
                                               Out* y, int64_t d) {
  int64_t c = 0;
  for (; c + kWidth <= d; c += kWidth) {
    F acc = F{};
    for (int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[j] : 1.0f;
      acc += w * load_row(src + static_cast<int64_t>(rows[j]) * d + c);
    }
    store_row(y + c, acc);
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

// acc += each group of kLanes lanes of p, lowest first (moe.hpp's partial sums: column c into lane c mod kLanes).
template <class V>  // F (a template, so the widths not taken are discarded)
[[gnu::always_inline]] inline Partials add_parts(Partials acc, V p) {
  if constexpr (sizeof(V) == sizeof(Partials)) {
    return acc + p;
  } else if constexpr (sizeof(V) == 2 * sizeof(Partials) && sizeof(Partials) == 16) {
    acc += __builtin_shufflevector(p, p, 0, 1, 2, 3);
    return acc + __builtin_shufflevector(p, p, 4, 5, 6, 7);
  } else if constexpr (sizeof(V) == 4 * sizeof(Partials)) {
    acc += __builtin_shufflevector(p, p, 0, 1, 2, 3);
    acc += __builtin_shufflevector(p, p, 4, 5, 6, 7);
    acc += __builtin_shufflevector(p, p, 8, 9, 10, 11);
    return acc + __builtin_shufflevector(p, p, 12, 13, 14, 15);
  } else {
    static_assert(sizeof(V) == 2 * sizeof(Partials) && sizeof(Partials) == 32);
    acc += __builtin_shufflevector(p, p, 0, 1, 2, 3, 4, 5, 6, 7);
    return acc + __builtin_shufflevector(p, p, 8, 9, 10, 11, 12, 13, 14, 15);
  }
}

// dweight[i] for i in [first, first + count), count <= kDots: kDots dots side by side, so their additions' latency
// overlaps (the unused ones repeat the first and are not stored), each in moe.hpp's order.
template <class Dy, class Src>
[[gnu::always_inline]] inline void dot_group(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                                             int64_t first, int64_t count, int64_t k, int64_t d) {
  const Dy* g[kDots];
  const Src* s[kDots];
  Partials acc[kDots];
  for (int64_t q = 0; q < kDots; ++q) {
    const int64_t i = first + (q < count ? q : 0);
    g[q] = dy + (i / k) * d;
    s[q] = src + static_cast<int64_t>(rows[i]) * d;
    acc[q] = Partials{};
  }
  int64_t c = 0;
  for (; c + kWidth <= d; c += kWidth) {
#pragma GCC unroll 4
    for (int64_t q = 0; q < kDots; ++q) acc[q] = add_parts(acc[q], load_row(g[q] + c) * load_row(s[q] + c));
  }
  for (; c + kLanes <= d; c += kLanes) {
#pragma GCC unroll 4
    for (int64_t q = 0; q < kDots; ++q) {
      acc[q] += load_partials(g[q] + c) * load_partials(s[q] + c);
    }
  }
  for (int64_t q = 0; q < count; ++q) {
    float sum = 0.0f;
    for (int64_t l = 0; l < kLanes; ++l) sum += acc[q][l];
    for (int64_t t = c; t < d; ++t) sum += detail::to_f32(g[q][t]) * detail::to_f32(s[q][t]);
    dweight[first + q] = sum;
  }
}

// The kernels' loops (the OpenMP regions take this region's target). No contraction into FMA: gelu.cpp.
template <class In, class Out>
__attribute__((optimize("fp-contract=off"))) void gather(const In* x, const std::int32_t* index, const float* scale,
                                                         Out* out, int64_t rows, int64_t d) {
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * d),
    gather_row(x + static_cast<int64_t>(index[r]) * d, scale != nullptr ? scale[r] : 1.0f, out + r * d, d);)
}

template <class In, class Out>
__attribute__((optimize("fp-contract=off"))) void combine(const In* src, const std::int32_t* rows,
                                                          const float* weight, Out* out, int64_t tokens, int64_t k,
                                                          int64_t d) {
  CLEAVE_PARALLEL_FOR(n, tokens, detail::worth_parallel(tokens * k * d),
    combine_row(src, rows + n * k, weight != nullptr ? weight + n * k : nullptr, k, out + n * d, d);)
}

template <class Dy, class Src>
__attribute__((optimize("fp-contract=off"))) void weight_grad(const Dy* dy, const Src* src, const std::int32_t* rows,
                                                              float* dweight, int64_t tokens, int64_t k, int64_t d) {
  const int64_t dots = tokens * k, groups = (dots + kDots - 1) / kDots;
  CLEAVE_PARALLEL_FOR(b, groups, detail::worth_parallel(dots * d),
    dot_group(dy, src, rows, dweight, b * kDots, std::min(kDots, dots - b * kDots), k, d);)
}
