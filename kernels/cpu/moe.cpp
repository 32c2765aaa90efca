// Mixture-of-experts routing kernels on the CPU (see moe.hpp): output rows shared out over the OpenMP team when
// the call is worth one (CLEAVE_PARALLEL_FOR); each output element has one writer, so no thread count changes a bit.
// bf16 rows are widened as they are read (in the arithmetic's loop, or a row into the thread's scratch block for the
// dot) and an output row is computed in f32 (in place, or in the thread's block) and narrowed once as it is stored:
// the bits of widening every input, running the f32 kernel and narrowing every output (MoeKernels.Bf16*).
// The weight gradient's dots run on one native vector (vec_math.hpp) with a fixed reduction order: kLanes partial
// sums over the columns in order, added lane by lane, then the tail (a scalar loop would not vectorise: GCC keeps a
// float sum's order).
#include "kernels/cpu/moe.hpp"

#include <type_traits>

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

template <typename T>
constexpr bool kBf16 = std::is_same_v<T, std::uint16_t>;

// Floats of a thread's row buffer for d columns, rounded up to whole 64-byte lines.
std::size_t row_floats(std::int64_t d) { return static_cast<std::size_t>((d + 15) / 16 * 16); }

// Row `row` as f32: the f32 row itself, or a bf16 row widened into `buf`.
const float* f32_row(const float* row, std::int64_t, float*) { return row; }
const float* f32_row(const std::uint16_t* row, std::int64_t d, float* buf) {
  cast_bf16_to_f32_serial(row, buf, d);
  return buf;
}

// Where an output row is computed in f32: the f32 row itself, or `buf` for a bf16 row (store_row narrows it).
float* f32_out(float* row, float*) { return row; }
float* f32_out(std::uint16_t*, float* buf) { return buf; }
void store_row(const float*, float*, std::int64_t) {}
void store_row(const float* buf, std::uint16_t* row, std::int64_t d) { cast_f32_to_bf16_serial(buf, row, d); }

float dot(const float* a, const float* b, std::int64_t d) {
  using namespace detail;
  f32xN acc = splat(0.0f);
  std::int64_t c = 0;
  for (; c + kLanes <= d; c += kLanes) acc += load_vec(a + c) * load_vec(b + c);
  float sum = hsum(acc);
  for (; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

}  // namespace

template <typename In, typename Out>
void moe_gather(const In* x, const std::int32_t* index, const float* scale, Out* out, std::int64_t rows,
                std::int64_t n_tokens, std::int64_t d, KernelScratch* scratch) {
  for (std::int64_t r = 0; r < rows; ++r) {
    CLEAVE_ASSERT(index[r] >= 0 && index[r] < n_tokens, "moe_gather: index[{}] = {} is outside [0, {})", r, index[r],
                  n_tokens);
  }
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(0, kBf16<Out> ? row_floats(d) : 0);
  CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * d),
    const In* src = x + static_cast<std::int64_t>(index[r]) * d;
    const float s = scale != nullptr ? scale[r] : 1.0f;
    float* dst = f32_out(out + r * d, lease.thread_block());
    for (std::int64_t c = 0; c < d; ++c) dst[c] = s * detail::to_f32(src[c]);
    store_row(dst, out + r * d, d);)
}

template <typename In, typename Out>
void moe_combine(const In* src, const std::int32_t* rows, const float* weight, Out* out, std::int64_t tokens,
                 std::int64_t k, std::int64_t n_rows, std::int64_t d, KernelScratch* scratch) {
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    CLEAVE_ASSERT(rows[i] >= 0 && rows[i] < n_rows, "moe_combine: rows[{}] = {} is outside [0, {})", i, rows[i],
                  n_rows);
  }
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(0, kBf16<Out> ? row_floats(d) : 0);
  CLEAVE_PARALLEL_FOR(n, tokens, detail::worth_parallel(tokens * k * d),
    float* acc = f32_out(out + n * d, lease.thread_block());
    for (std::int64_t c = 0; c < d; ++c) acc[c] = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[n * k + j] : 1.0f;
      const In* s = src + static_cast<std::int64_t>(rows[n * k + j]) * d;
      for (std::int64_t c = 0; c < d; ++c) acc[c] += w * detail::to_f32(s[c]);
    }
    store_row(acc, out + n * d, d);)
}

template <typename Dy, typename Src>
void moe_combine_weight_grad(const Dy* dy, const Src* src, const std::int32_t* rows, float* dweight,
                             std::int64_t tokens, std::int64_t k, std::int64_t n_rows, std::int64_t d,
                             KernelScratch* scratch) {
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    CLEAVE_ASSERT(rows[i] >= 0 && rows[i] < n_rows, "moe_combine_weight_grad: rows[{}] = {} is outside [0, {})", i,
                  rows[i], n_rows);
  }
  const std::size_t dy_floats = kBf16<Dy> ? row_floats(d) : 0, src_floats = kBf16<Src> ? row_floats(d) : 0;
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(0, dy_floats + src_floats);
  CLEAVE_PARALLEL_FOR(i, tokens * k, detail::worth_parallel(tokens * k * d),
    float* block = lease.thread_block();
    const float* g = f32_row(dy + (i / k) * d, d, block);
    const float* s = f32_row(src + static_cast<std::int64_t>(rows[i]) * d, d, block + dy_floats);
    dweight[i] = dot(g, s, d);)
}

#define CLEAVE_MOE_KERNELS(A, B)                                                                                 \
  template void moe_gather<A, B>(const A*, const std::int32_t*, const float*, B*, std::int64_t, std::int64_t,   \
                                 std::int64_t, KernelScratch*);                                                  \
  template void moe_combine<A, B>(const A*, const std::int32_t*, const float*, B*, std::int64_t, std::int64_t,  \
                                  std::int64_t, std::int64_t, KernelScratch*);                                   \
  template void moe_combine_weight_grad<A, B>(const A*, const B*, const std::int32_t*, float*, std::int64_t,    \
                                              std::int64_t, std::int64_t, std::int64_t, KernelScratch*);
CLEAVE_MOE_KERNELS(float, float)
CLEAVE_MOE_KERNELS(float, std::uint16_t)
CLEAVE_MOE_KERNELS(std::uint16_t, float)
CLEAVE_MOE_KERNELS(std::uint16_t, std::uint16_t)
#undef CLEAVE_MOE_KERNELS

}  // namespace cleave::kernels::cpu
