// Mixture-of-experts routing kernels on the CPU (see moe.hpp): output rows shared out over the OpenMP team when the
// call is worth one (CLEAVE_PARALLEL_FOR); each output element has one writer, so no thread count changes a bit.
//
// The loops (moe_paths.hpp) are written once over a generic float vector and compiled for the build's baseline
// vectors and, chosen at run time from the CPU through vector_isa.hpp's isa_path (as cast.cpp, gelu.cpp), for AVX2
// (8 lanes) and AVX-512 (16 lanes), the last narrowing with AVX-512 BF16's vcvtneps2bf16 where the CPU has it (as
// vector_isa.hpp's avx512_bf16_available lets a kernel take on top of its AVX-512 path). A bf16 operand is widened in
// registers as it is loaded and a bf16 output narrowed in registers as it is stored, so bf16 rows move at the speed
// of their bytes rather than through scalar conversion into an f32 row buffer (issue 39: 3-4x the roofline before;
// benchmarks/kernels/RESULTS-2026-11-30-d-moe-routing-bf16.md). The unscaled gather between rows of one dtype is a
// row copy. The weight gradient keeps moe.hpp's kLanes partial sums on every path: a wider vector holds several dots'
// partials side by side, its products' blocks transposed across those dots so that one vector add takes kLanes columns
// of each (moe_paths.hpp's dot_group; on AVX-512, 8 dots in flight and bf16 rows widened 32 columns at a time by
// in-lane unpacks; benchmarks/kernels/RESULTS-2026-11-30-k-moe-combine-grad.md). No path contracts a multiply and an
// add into an FMA (fp-contract=off, as gelu.cpp): every path gives the same bits
// (MoeKernels.EveryIsaPathGivesTheBitsOfTheScalarOrder).
#include "kernels/cpu/moe.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline): see gelu.cpp.
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"
#include "kernels/moe_dot_lanes.hpp"

namespace cleave::kernels::cpu {
namespace {

// The weight gradient's partial sums: kMoeDotLanes of them (kernels/moe_dot_lanes.hpp, a constant: not this
// file's vector width, so no compile flag changes the order), the order the CUDA twin reproduces
// (kernels/cuda/moe_dot_order.hpp, at the same constant).
constexpr int64_t kLanes = kMoeDotLanes;
using Partials = float __attribute__((vector_size(kLanes * sizeof(float))));
static_assert(sizeof(Partials) == kMoeDotLanes * sizeof(float), "the partials' vector is kMoeDotLanes floats");

// kLanes values of a row as Partials (bf16 widened exactly): the weight gradient's columns past the last whole F.
[[gnu::always_inline]] inline Partials load_partials(const float* p) { return detail::load<Partials>(p); }
[[gnu::always_inline]] inline Partials load_partials(const std::uint16_t* p) { return detail::load_bf16<Partials>(p); }

namespace baseline_path {
using F = detail::f32xN;
#include "kernels/cpu/moe_paths.hpp"
}  // namespace baseline_path

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2_path {
using F = detail::f32x8;
#include "kernels/cpu/moe_paths.hpp"
}  // namespace avx2_path
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw")
namespace avx512_path {
using F = detail::f32x16;
#define CLEAVE_MOE_AVX512
#include "kernels/cpu/moe_paths.hpp"
#undef CLEAVE_MOE_AVX512
}  // namespace avx512_path
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")
namespace avx512_bf16_path {
using F = detail::f32x16;
#define CLEAVE_MOE_AVX512
#define CLEAVE_MOE_BF16_INSN
#include "kernels/cpu/moe_paths.hpp"
#undef CLEAVE_MOE_BF16_INSN
#undef CLEAVE_MOE_AVX512
}  // namespace avx512_bf16_path
#pragma GCC pop_options

// A kernel's function for (isa, bf16_insn) after the checks: AVX-512 BF16's narrowing on top of AVX-512 where asked.
#define CLEAVE_MOE_PATH(name, ...)                                                                      \
  (check_bf16_insn(isa, bf16_insn, "moe_" #name)                                                        \
       ? avx512_bf16_path::name<__VA_ARGS__>                                                            \
       : isa_path(isa, "moe_" #name, baseline_path::name<__VA_ARGS__>, avx2_path::name<__VA_ARGS__>,    \
                  avx512_path::name<__VA_ARGS__>))
#else
#define CLEAVE_MOE_PATH(name, ...)                                                                      \
  (check_bf16_insn(isa, bf16_insn, "moe_" #name),                                                       \
   isa_path(isa, "moe_" #name, baseline_path::name<__VA_ARGS__>, baseline_path::name<__VA_ARGS__>,      \
            baseline_path::name<__VA_ARGS__>))
#endif

// Whether to narrow with AVX-512 BF16: only on top of AVX-512, only where the CPU has it (a bug of the caller else).
bool check_bf16_insn(VectorIsa isa, bool bf16_insn, const char* op) {
  CLEAVE_ASSERT(!bf16_insn || (isa == VectorIsa::kAvx512 && avx512_bf16_available()),
                "{}: AVX-512 BF16 narrowing asked for on path {} of a CPU that {}", op, static_cast<int>(isa),
                avx512_bf16_available() ? "has it (it needs the AVX-512 path)" : "lacks it");
  return bf16_insn;
}

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
bool widest_bf16_insn() {
  static const bool insn = widest() == VectorIsa::kAvx512 && avx512_bf16_available();
  return insn;
}

}  // namespace

template <typename In, typename Out>
void moe_gather_isa(VectorIsa isa, bool bf16_insn, const In* x, const std::int32_t* index, const float* scale,
                    Out* out, std::int64_t rows, std::int64_t n_tokens, std::int64_t d) {
  check_indices(index, rows, n_tokens, "moe_gather", "index");
  const auto path = CLEAVE_MOE_PATH(gather, In, Out);
  if constexpr (std::is_same_v<In, Out>) {
    if (scale == nullptr) return copy_rows(x, index, out, rows, d);
  }
  path(x, index, scale, out, rows, d);
}

template <typename In, typename Out>
void moe_combine_isa(VectorIsa isa, bool bf16_insn, const In* src, const std::int32_t* rows, const float* weight,
                     Out* out, std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  check_indices(rows, tokens * k, n_rows, "moe_combine", "rows");
  CLEAVE_MOE_PATH(combine, In, Out)(src, rows, weight, out, tokens, k, d);
}

template <typename Dy, typename Src>
void moe_combine_weight_grad_isa(VectorIsa isa, bool bf16_insn, const Dy* dy, const Src* src,
                                 const std::int32_t* rows, float* dweight, std::int64_t tokens, std::int64_t k,
                                 std::int64_t n_rows, std::int64_t d) {
  check_indices(rows, tokens * k, n_rows, "moe_combine_weight_grad", "rows");
  CLEAVE_MOE_PATH(weight_grad, Dy, Src)(dy, src, rows, dweight, tokens, k, d);
}

#undef CLEAVE_MOE_PATH

template <typename In, typename Out>
void moe_gather(const In* x, const std::int32_t* index, const float* scale, Out* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d) {
  moe_gather_isa(widest(), widest_bf16_insn(), x, index, scale, out, rows, n_tokens, d);
}

template <typename In, typename Out>
void moe_combine(const In* src, const std::int32_t* rows, const float* weight, Out* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  moe_combine_isa(widest(), widest_bf16_insn(), src, rows, weight, out, tokens, k, n_rows, d);
}

template <typename Dy, typename Src>
void moe_combine_weight_grad(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d) {
  moe_combine_weight_grad_isa(widest(), widest_bf16_insn(), dy, src, rows, dweight, tokens, k, n_rows, d);
}

#define CLEAVE_MOE_KERNELS(A, B)                                                                                   \
  template void moe_gather<A, B>(const A*, const std::int32_t*, const float*, B*, std::int64_t, std::int64_t,     \
                                 std::int64_t);                                                                    \
  template void moe_combine<A, B>(const A*, const std::int32_t*, const float*, B*, std::int64_t, std::int64_t,    \
                                  std::int64_t, std::int64_t);                                                     \
  template void moe_combine_weight_grad<A, B>(const A*, const B*, const std::int32_t*, float*, std::int64_t,      \
                                              std::int64_t, std::int64_t, std::int64_t);                           \
  template void moe_gather_isa<A, B>(VectorIsa, bool, const A*, const std::int32_t*, const float*, B*, std::int64_t,    \
                                     std::int64_t, std::int64_t);                                                  \
  template void moe_combine_isa<A, B>(VectorIsa, bool, const A*, const std::int32_t*, const float*, B*, std::int64_t,   \
                                      std::int64_t, std::int64_t, std::int64_t);                                   \
  template void moe_combine_weight_grad_isa<A, B>(VectorIsa, bool, const A*, const B*, const std::int32_t*,       \
                                                  float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t);
CLEAVE_MOE_KERNELS(float, float)
CLEAVE_MOE_KERNELS(float, std::uint16_t)
CLEAVE_MOE_KERNELS(std::uint16_t, float)
CLEAVE_MOE_KERNELS(std::uint16_t, std::uint16_t)
#undef CLEAVE_MOE_KERNELS

}  // namespace cleave::kernels::cpu
