// Internal to moe.cpp: the routing kernels' loops over one float vector type, included once per vector path inside
// that path's namespace and `#pragma GCC target` region (so every function here, the OpenMP regions' outlined
// bodies included, takes the path's instruction set). No include guard, on purpose. The includer defines before it:
//   F                    the path's float vector (the build's f32xN baseline, f32x8 AVX2, f32x16 AVX-512), at least
//                        as wide as the weight gradient's Partials (f32xN);
//   CLEAVE_MOE_AVX512    (on the AVX-512 paths) widen bf16 with AVX-512 instructions (vpmovzxwd; the weight
//                        gradient's in-lane unpacks, 32 columns at a time);
//   CLEAVE_MOE_BF16_INSN (optional) narrow with AVX-512 BF16's vcvtneps2bf16 instead of the integer rounding.
// Invariant: every path gives moe.hpp's bits. vcvtneps2bf16 rounds as float_to_bf16 does (to nearest even, NaN to
// the quiet NaN of its top half) except that it flushes a subnormal input to zero: a vector holding one takes the
// integer rounding instead (never in practice; MoeKernels' inputs hold subnormals so the test sees both).

constexpr int64_t kWidth = static_cast<int64_t>(sizeof(F) / 4);

// kWidth values of a row as F (bf16 widened exactly), and F stored (bf16 narrowed to nearest even).
[[gnu::always_inline]] inline F load_row(const float* p) { return detail::load<F>(p); }
[[gnu::always_inline]] inline F load_row(const std::uint16_t* p) {
#if defined(CLEAVE_MOE_AVX512)
  // One vpmovzxwd from memory and a shift (the generic widening splits the load into 256-bit halves: 6 operations).
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  // The zero-masked form with every lane kept: the unmasked intrinsics read an undefined vector that GCC 12 warns of.
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(static_cast<__mmask16>(0xffff), half);
  return __builtin_bit_cast(F, __builtin_bit_cast(detail::u32x16, wide) << 16);
#else
  return detail::load_bf16<F>(p);
#endif
}
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

// The weight gradient's packing: kPack dots side by side in one F (block b, lanes [b·kLanes, (b+1)·kLanes): dot b's
// kLanes partial sums, moe.hpp's order), kChains such vectors in flight so their additions' latency overlaps:
// kGroupDots dots per group (4 on baseline and AVX2, 8 on AVX-512 with 4-lane partials).
constexpr int64_t kPack = kWidth / kLanes;
constexpr int64_t kChains = kPack == 1 ? 4 : 2;
constexpr int64_t kGroupDots = kPack * kChains;
static_assert(kPack * kLanes == kWidth && (kPack == 1 || kPack == 2 || kPack == 4), "F is 1, 2 or 4 Partials");

// The kPack product vectors' blocks transposed: block b of out[m] is block m of p[b] (dot b's columns
// [m·kLanes, (m+1)·kLanes) of this F), so adding out[0], out[1], ... in turn adds each dot's products kLanes lanes at
// a time, lowest first: column c into partial c mod kLanes, in column order. One vector add per kLanes columns of
// kPack dots, where adding each dot's blocks apart took an extract and an add per block.
template <class V>  // F (a template, so the widths not taken are discarded)
[[gnu::always_inline]] inline void transpose_blocks(const V* p, V* out) {
  if constexpr (kPack == 1) {
    out[0] = p[0];
  } else if constexpr (kPack == 2 && kWidth == 8) {
    out[0] = __builtin_shufflevector(p[0], p[1], 0, 1, 2, 3, 8, 9, 10, 11);
    out[1] = __builtin_shufflevector(p[0], p[1], 4, 5, 6, 7, 12, 13, 14, 15);
  } else if constexpr (kPack == 2) {
    static_assert(sizeof(V) == 64);
    out[0] = __builtin_shufflevector(p[0], p[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    out[1] = __builtin_shufflevector(p[0], p[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  } else {
    static_assert(sizeof(V) == 64 && sizeof(V) == 4 * sizeof(Partials));
    // u0 = [p0.0 p0.1 p1.0 p1.1], u1 = [p0.2 p0.3 p1.2 p1.3], u2 and u3 the same of p2 and p3 (blocks of 4).
    const V u0 = __builtin_shufflevector(p[0], p[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const V u1 = __builtin_shufflevector(p[0], p[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const V u2 = __builtin_shufflevector(p[2], p[3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const V u3 = __builtin_shufflevector(p[2], p[3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    out[0] = __builtin_shufflevector(u0, u2, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    out[1] = __builtin_shufflevector(u0, u2, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    out[2] = __builtin_shufflevector(u1, u3, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    out[3] = __builtin_shufflevector(u1, u3, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  }
}

#if defined(CLEAVE_MOE_AVX512)
// 32 bf16 columns as two F, widened exactly by an in-lane unpack against zero (each value to the top half of its
// 32-bit lane; no cross-lane widening, no shift): lo holds the column groups of 4 numbered 0, 2, 4, 6 in its blocks,
// hi 1, 3, 5, 7.
[[gnu::always_inline]] inline void load_pair(const std::uint16_t* p, F& lo, F& hi) {
  const __m512i x = _mm512_loadu_si512(p);
  lo = __builtin_bit_cast(F, _mm512_unpacklo_epi16(_mm512_setzero_si512(), x));
  hi = __builtin_bit_cast(F, _mm512_unpackhi_epi16(_mm512_setzero_si512(), x));
}

// The packed loop over 2·kWidth columns at a time of bf16 rows (kLanes 4, kPack 4): load_pair's halves multiplied,
// each half's blocks transposed, and the transposed vectors added in column order (groups 0, 1, 2, ..., 7).
// Returns the first column not added.
template <class Dy, class Src>
[[gnu::always_inline]] inline int64_t add_pairs(const Dy* const* g, const Src* const* s, F* acc, int64_t d) {
  int64_t c = 0;
  if constexpr (std::is_same_v<Dy, std::uint16_t> && std::is_same_v<Src, std::uint16_t> && kPack == 4) {
    for (; c + 2 * kWidth <= d; c += 2 * kWidth) {
#pragma GCC unroll 4
      for (int64_t h = 0; h < kChains; ++h) {
        F lo[kPack], hi[kPack], tlo[kPack], thi[kPack];
#pragma GCC unroll 4
        for (int64_t b = 0; b < kPack; ++b) {
          F glo, ghi, slo, shi;
          load_pair(g[h * kPack + b] + c, glo, ghi);
          load_pair(s[h * kPack + b] + c, slo, shi);
          lo[b] = glo * slo;
          hi[b] = ghi * shi;
        }
        transpose_blocks(lo, tlo);
        transpose_blocks(hi, thi);
#pragma GCC unroll 4
        for (int64_t m = 0; m < kPack; ++m) {
          acc[h] += tlo[m];
          acc[h] += thi[m];
        }
      }
    }
  }
  return c;
}
#else
template <class Dy, class Src>
[[gnu::always_inline]] inline int64_t add_pairs(const Dy* const*, const Src* const*, F*, int64_t) {
  return 0;
}
#endif

// dweight[i] for i in [first, first + count), count <= kGroupDots, each in moe.hpp's order (the unused dots repeat
// the first and are not stored): the columns of whole F packed (transpose_blocks), then each dot's partials taken
// out of its block for the columns of whole Partials past them, the partials added in lane order, then the tail.
template <class Dy, class Src>
[[gnu::always_inline]] inline void dot_group(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                                             int64_t first, int64_t count, int64_t k, int64_t d) {
  const Dy* g[kGroupDots];
  const Src* s[kGroupDots];
  for (int64_t q = 0; q < kGroupDots; ++q) {
    const int64_t i = first + (q < count ? q : 0);
    g[q] = dy + (i / k) * d;
    s[q] = src + static_cast<int64_t>(rows[i]) * d;
  }
  F acc[kChains];
  for (int64_t h = 0; h < kChains; ++h) acc[h] = F{};
  int64_t c = add_pairs(g, s, acc, d);
  for (; c + kWidth <= d; c += kWidth) {
#pragma GCC unroll 4
    for (int64_t h = 0; h < kChains; ++h) {
      F p[kPack], t[kPack];
#pragma GCC unroll 4
      for (int64_t b = 0; b < kPack; ++b) p[b] = load_row(g[h * kPack + b] + c) * load_row(s[h * kPack + b] + c);
      transpose_blocks(p, t);
#pragma GCC unroll 4
      for (int64_t m = 0; m < kPack; ++m) acc[h] += t[m];
    }
  }
  float packed[kChains * kWidth];  // dot q's partials at [q·kLanes, (q+1)·kLanes)
  __builtin_memcpy(packed, acc, sizeof packed);
  Partials part[kGroupDots];
  for (int64_t q = 0; q < kGroupDots; ++q) part[q] = detail::load<Partials>(packed + q * kLanes);
  for (; c + kLanes <= d; c += kLanes) {
#pragma GCC unroll 8
    for (int64_t q = 0; q < kGroupDots; ++q) part[q] += load_partials(g[q] + c) * load_partials(s[q] + c);
  }
  for (int64_t q = 0; q < count; ++q) {
    float sum = 0.0f;
    for (int64_t l = 0; l < kLanes; ++l) sum += part[q][l];
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
  const int64_t dots = tokens * k, groups = (dots + kGroupDots - 1) / kGroupDots;
  CLEAVE_PARALLEL_FOR(b, groups, detail::worth_parallel(dots * d),
    dot_group(dy, src, rows, dweight, b * kGroupDots, std::min(kGroupDots, dots - b * kGroupDots), k, d);)
}
