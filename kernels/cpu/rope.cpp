// RoPE + packing (grouped or repeated key/value heads), forward and backward. See rope.hpp. Parallel over
// (batch, position) rows; cos and sin come from a [T, hd/2] table built once per call (f32 angles, f32 cos/sin)
// in the shared block of the caller's KernelScratch (kernel_scratch.hpp), the bf16 row buffers in its per-thread
// blocks: with the run's scratch a steady-state call allocates nothing.
//
// The rotation is written once over generic vectors (issue 39 part 4), like swiglu.cpp: the baseline path (the
// build's own vectors), AVX2 (8 lanes) and AVX-512 (16 lanes), chosen at run time. Every element's rotation and
// every sum of packed copies runs the same IEEE operations in the same order on every path, without contraction
// into FMA (fp-contract=off), the pairs past the last full vector on a one-lane broadcast: every path gives the
// same bits (KernelRope.EveryIsaPathGivesTheSameBits), and the thread count never changes a result.
//
// bf16 tensors (uint16_t bits) are converted a row at a time inside the row loop (the row's inputs widened into
// the thread's f32 row block, the outputs narrowed from it, in L1), not widened whole into f32 scratch and
// narrowed back: the same f32 arithmetic on the same values, one rounding, so the same bits
// (KernelRope.Bf16RowsGiveTheWidenedF32Bits). Each path's dispatch is vector_isa.hpp's isa_path.
#include "kernels/cpu/rope.hpp"

// Wide vectors never cross a call boundary here (the helpers are always_inline), so the ABI note GCC emits for
// 32- and 64-byte vector arguments without AVX does not apply (before vec_math.hpp, where it is reported).
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/core/error.hpp"
#include "kernels/cpu/bf16_vectors.hpp"
#include "kernels/cpu/kernel_scratch.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"
#include "kernels/cpu/wide_vectors.hpp"

namespace cleave::kernels::cpu {
namespace {

using detail::broadcast;
using detail::f32x16;
using detail::f32x8;
using detail::load;
using detail::store;

void check_shape(const RopeShape& s, const char* op) {
  CLEAVE_ASSERT(s.batch >= 0 && s.seq >= 0 && s.q_heads > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 &&
                    s.head_dim > 0 && s.head_dim % 2 == 0 && s.position_offset >= 0 && s.theta > 0.0f,
                "{}: bad shape B {} T {} Hq {} Hkv {} hd {} offset {} theta {}", op, s.batch, s.seq, s.q_heads,
                s.kv_heads, s.head_dim, s.position_offset, s.theta);
  CLEAVE_ASSERT(s.packed_kv_heads == 0 || s.packed_kv_heads == s.kv_heads || s.packed_kv_heads == s.q_heads,
                "{}: packed kv heads {} must be Hkv {} or Hq {}", op, s.packed_kv_heads, s.kv_heads, s.q_heads);
}

// The call's cos and sin tables [T, hd/2] (in the lease's shared block) and its scratch (the bf16 row blocks).
struct Table {
  const float* cos;
  const float* sin;
  const KernelScratch::Lease* scratch;
};

size_t table_bytes(const RopeShape& s) { return 2 * static_cast<size_t>(s.seq * (s.head_dim / 2)) * sizeof(float); }

Table make_table(const RopeShape& s, const KernelScratch::Lease& scratch) {
  const int64_t half = s.head_dim / 2;
  float* cos = reinterpret_cast<float*>(scratch.shared());
  float* sin = cos + s.seq * half;
  for (int64_t t = 0; t < s.seq; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = rope_angle(t, i, s);
      cos[t * half + i] = std::cos(a);
      sin[t * half + i] = std::sin(a);
    }
  }
  return Table{cos, sin, &scratch};
}

// out = rotate(x) for one head at one position (kUndo: rotate^T, the rotation by -angle). x may equal out: each
// pair block is read before it is written.
template <class F, int64_t L, bool kUndo>
[[gnu::always_inline]] inline void rotate(const float* x, float* out, const float* c, const float* sn, int64_t half) {
  const int64_t full = half / L * L;
  for (int64_t i = 0; i < full; i += L) {
    const F a = load<F>(x + i), b = load<F>(x + i + half), cv = load<F>(c + i), sv = load<F>(sn + i);
    store(out + i, kUndo ? a * cv + b * sv : a * cv - b * sv);
    store(out + i + half, kUndo ? b * cv - a * sv : b * cv + a * sv);
  }
  for (int64_t i = full; i < half; ++i) {
    const F a = broadcast<F>(x[i]), b = broadcast<F>(x[i + half]), cv = broadcast<F>(c[i]), sv = broadcast<F>(sn[i]);
    out[i] = (kUndo ? a * cv + b * sv : a * cv - b * sv)[0];
    out[i + half] = (kUndo ? b * cv - a * sv : b * cv + a * sv)[0];
  }
}

// One (batch, position) row of the forward: qkv row from the q, k and v rows.
template <class F, int64_t L>
[[gnu::always_inline]] inline void pack_row(const float* qr, const float* kr, const float* vr, float* out,
                                            const float* c, const float* sn, const RopeShape& s, int64_t P) {
  const int64_t hd = s.head_dim, half = hd / 2, r_copies = P / s.kv_heads, cq = s.q_heads * hd, cp = P * hd;
  for (int64_t h = 0; h < s.q_heads; ++h) rotate<F, L, false>(qr + h * hd, out + h * hd, c, sn, half);
  for (int64_t j = 0; j < P; ++j) {
    const int64_t kvh = j / r_copies;
    rotate<F, L, false>(kr + kvh * hd, out + cq + j * hd, c, sn, half);
    std::memcpy(out + cq + cp + j * hd, vr + kvh * hd, static_cast<size_t>(hd) * sizeof(float));
  }
}

// dst[0, hd) = the sum of the r packed copies starting at src (stride hd), in head order.
template <class F, int64_t L>
[[gnu::always_inline]] inline void sum_copies(const float* src, float* dst, int64_t hd, int64_t copies) {
  const int64_t full = hd / L * L;
  for (int64_t x = 0; x < full; x += L) {
    F acc = load<F>(src + x);
    for (int64_t j = 1; j < copies; ++j) acc += load<F>(src + j * hd + x);
    store(dst + x, acc);
  }
  for (int64_t x = full; x < hd; ++x) {
    F acc = broadcast<F>(src[x]);
    for (int64_t j = 1; j < copies; ++j) acc += broadcast<F>(src[j * hd + x]);
    dst[x] = acc[0];
  }
}

// One row of the backward: dq, dk, dv rows from the dqkv row.
template <class F, int64_t L>
[[gnu::always_inline]] inline void unpack_row(const float* in, float* dqr, float* dkr, float* dvr, const float* c,
                                              const float* sn, const RopeShape& s, int64_t P) {
  const int64_t hd = s.head_dim, half = hd / 2, r_copies = P / s.kv_heads, cq = s.q_heads * hd, cp = P * hd;
  for (int64_t h = 0; h < s.q_heads; ++h) rotate<F, L, true>(in + h * hd, dqr + h * hd, c, sn, half);
  for (int64_t kvh = 0; kvh < s.kv_heads; ++kvh) {
    float* dkh = dkr + kvh * hd;
    sum_copies<F, L>(in + cq + kvh * r_copies * hd, dkh, hd, r_copies);
    sum_copies<F, L>(in + cq + cp + kvh * r_copies * hd, dvr + kvh * hd, hd, r_copies);
    rotate<F, L, true>(dkh, dkh, c, sn, half);  // in place
  }
}

// P (packed key/value heads): the shape's, or Hq (the repeated layout) when unset.
int64_t packed_heads(const RopeShape& s) { return s.packed_kv_heads > 0 ? s.packed_kv_heads : s.q_heads; }

// f32 floats a thread's row block holds: a row's q, k, v and qkv (the backward's dqkv, dq, dk, dv: as many).
template <class T>
size_t row_floats(const RopeShape& s) {
  if (!std::is_same_v<T, uint16_t>) return 0;  // f32 rows are used in place
  const int64_t cq = s.q_heads * s.head_dim, ckv = s.kv_heads * s.head_dim;
  return static_cast<size_t>(cq + 2 * ckv + cq + 2 * packed_heads(s) * s.head_dim);
}

// The bf16 rows (issue 39): the row's inputs widened into the thread's row block, the f32 row body run there, its
// outputs narrowed (round to nearest even, as cast.hpp), all in L1. Every element is computed from the same
// widened values by the same f32 body as the whole-tensor path (widen q, k, v; rope_pack_qkv; narrow qkv), and
// narrowed once by the same rule, so the bits are that path's (KernelRope.Bf16RowsGiveTheWidenedF32Bits).
template <class F, int64_t L, class U32, class U16>
[[gnu::always_inline]] inline void pack_row_of(const uint16_t* qr, const uint16_t* kr, const uint16_t* vr, uint16_t* out,
                                            const float* c, const float* sn, const RopeShape& s, int64_t P,
                                            const KernelScratch::Lease& scratch) {
  const int64_t cq = s.q_heads * s.head_dim, ckv = s.kv_heads * s.head_dim, width = cq + 2 * P * s.head_dim;
  float* q = scratch.thread_block();  // row_floats<uint16_t>(s)
  float *k = q + cq, *v = k + ckv, *o = v + ckv;
  detail::widen_range<U32, U16>(qr, q, 0, cq);
  detail::widen_range<U32, U16>(kr, k, 0, ckv);
  detail::widen_range<U32, U16>(vr, v, 0, ckv);
  pack_row<F, L>(q, k, v, o, c, sn, s, P);
  detail::narrow_range<U32, U16>(o, out, 0, width);
}

template <class F, int64_t L, class U32, class U16>
[[gnu::always_inline]] inline void unpack_row_of(const uint16_t* in, uint16_t* dqr, uint16_t* dkr, uint16_t* dvr,
                                              const float* c, const float* sn, const RopeShape& s, int64_t P,
                                              const KernelScratch::Lease& scratch) {
  const int64_t cq = s.q_heads * s.head_dim, ckv = s.kv_heads * s.head_dim, width = cq + 2 * P * s.head_dim;
  float* row = scratch.thread_block();  // row_floats<uint16_t>(s)
  float *dq = row + width, *dk = dq + cq, *dv = dk + ckv;
  detail::widen_range<U32, U16>(in, row, 0, width);
  unpack_row<F, L>(row, dq, dk, dv, c, sn, s, P);
  detail::narrow_range<U32, U16>(dq, dqr, 0, cq);
  detail::narrow_range<U32, U16>(dk, dkr, 0, ckv);
  detail::narrow_range<U32, U16>(dv, dvr, 0, ckv);
}

// The f32 rows under the same name, so a path's loop is written once for both element types.
template <class F, int64_t L, class U32, class U16>
[[gnu::always_inline]] inline void pack_row_of(const float* qr, const float* kr, const float* vr, float* out,
                                            const float* c, const float* sn, const RopeShape& s, int64_t P,
                                            const KernelScratch::Lease&) {
  pack_row<F, L>(qr, kr, vr, out, c, sn, s, P);
}

template <class F, int64_t L, class U32, class U16>
[[gnu::always_inline]] inline void unpack_row_of(const float* in, float* dqr, float* dkr, float* dvr, const float* c,
                                              const float* sn, const RopeShape& s, int64_t P,
                                              const KernelScratch::Lease&) {
  unpack_row<F, L>(in, dqr, dkr, dvr, c, sn, s, P);
}

// The loops are spelled out per path (a macro) because OpenMP outlines a parallel region into a function that
// takes the target of the function it is written in; each is a template over the element type T (float, or
// uint16_t for bf16 bits), with U32 x U16 the path's integer vectors for the bf16 casts.
#define CLEAVE_ROPE_PATHS(suffix, F, lanes, U32, U16, ...)                                                        \
  template <class T>                                                                                              \
  __VA_ARGS__ void pack_##suffix(const T* q, const T* k, const T* v, T* qkv, const RopeShape& s, const Table& tab) { \
    const int64_t hd = s.head_dim, half = hd / 2, P = packed_heads(s);                                            \
    const int64_t cq = s.q_heads * hd, ckv = s.kv_heads * hd, width = cq + 2 * P * hd, rows = s.batch * s.seq;    \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * width),                                            \
      const int64_t t = r % s.seq;                                                                                \
      pack_row_of<F, lanes, U32, U16>(q + r * cq, k + r * ckv, v + r * ckv, qkv + r * width,                         \
                                      tab.cos + t * half, tab.sin + t * half, s, P, *tab.scratch);)               \
  }                                                                                                               \
  template <class T>                                                                                              \
  __VA_ARGS__ void unpack_##suffix(const T* dqkv, T* dq, T* dk, T* dv, const RopeShape& s, const Table& tab) {    \
    const int64_t hd = s.head_dim, half = hd / 2, P = packed_heads(s);                                            \
    const int64_t cq = s.q_heads * hd, ckv = s.kv_heads * hd, width = cq + 2 * P * hd, rows = s.batch * s.seq;    \
    CLEAVE_PARALLEL_FOR(r, rows, detail::worth_parallel(rows * width),                                            \
      const int64_t t = r % s.seq;                                                                                \
      unpack_row_of<F, lanes, U32, U16>(dqkv + r * width, dq + r * cq, dk + r * ckv, dv + r * ckv,                   \
                                        tab.cos + t * half, tab.sin + t * half, s, P, *tab.scratch);)             \
  }

CLEAVE_ROPE_PATHS(baseline, detail::f32xN, detail::kLanes, detail::u32x4, detail::u16x4,
                  __attribute__((optimize("fp-contract=off"))))
#if defined(__x86_64__)
CLEAVE_ROPE_PATHS(avx2, f32x8, 8, detail::u32x8, detail::u16x8,
                  __attribute__((target("avx2"), optimize("fp-contract=off"))))
CLEAVE_ROPE_PATHS(avx512, f32x16, 16, detail::u32x16, detail::u16x16,
                  __attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off"))))
#endif
#undef CLEAVE_ROPE_PATHS

template <class T>
using PackFn = void(const T*, const T*, const T*, T*, const RopeShape&, const Table&);
template <class T>
using UnpackFn = void(const T*, T*, T*, T*, const RopeShape&, const Table&);

template <class T>
void pack(VectorIsa isa, const T* q, const T* k, const T* v, T* qkv, const RopeShape& s, KernelScratch* scratch) {
  check_shape(s, "rope_pack_qkv");
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(table_bytes(s), row_floats<T>(s));
  isa_path<PackFn<T>>(isa, "rope_pack_qkv", CLEAVE_ISA_PATHS(pack))(q, k, v, qkv, s, make_table(s, lease));
}

template <class T>
void unpack(VectorIsa isa, const T* dqkv, T* dq, T* dk, T* dv, const RopeShape& s, KernelScratch* scratch) {
  check_shape(s, "rope_pack_qkv_backward");
  ScratchFor scratch_for(scratch);
  const KernelScratch::Lease lease = scratch_for.get().lease(table_bytes(s), row_floats<T>(s));
  isa_path<UnpackFn<T>>(isa, "rope_pack_qkv_backward", CLEAVE_ISA_PATHS(unpack))(dqkv, dq, dk, dv, s,
                                                                                 make_table(s, lease));
}

}  // namespace

float rope_inv_freq(int64_t i, int64_t head_dim, float theta) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
  return 1.0f / std::pow(theta, exponent);
}

float rope_angle(int64_t t, int64_t i, const RopeShape& s) {
  return static_cast<float>(s.position_offset + t) * rope_inv_freq(i, s.head_dim, s.theta);
}

void rope_pack_qkv_isa(VectorIsa isa, const float* q, const float* k, const float* v, float* qkv,
                       const RopeShape& s, KernelScratch* scratch) {
  pack(isa, q, k, v, qkv, s, scratch);
}

void rope_pack_qkv_backward_isa(VectorIsa isa, const float* dqkv, float* dq, float* dk, float* dv,
                                const RopeShape& s, KernelScratch* scratch) {
  unpack(isa, dqkv, dq, dk, dv, s, scratch);
}

void rope_pack_qkv_isa(VectorIsa isa, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* qkv,
                       const RopeShape& s, KernelScratch* scratch) {
  pack(isa, q, k, v, qkv, s, scratch);
}

void rope_pack_qkv_backward_isa(VectorIsa isa, const uint16_t* dqkv, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                                const RopeShape& s, KernelScratch* scratch) {
  unpack(isa, dqkv, dq, dk, dv, s, scratch);
}

void rope_pack_qkv(const float* q, const float* k, const float* v, float* qkv, const RopeShape& s,
                   KernelScratch* scratch) {
  rope_pack_qkv_isa(best_vector_isa(), q, k, v, qkv, s, scratch);
}

void rope_pack_qkv_backward(const float* dqkv, float* dq, float* dk, float* dv, const RopeShape& s,
                            KernelScratch* scratch) {
  rope_pack_qkv_backward_isa(best_vector_isa(), dqkv, dq, dk, dv, s, scratch);
}

void rope_pack_qkv(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* qkv, const RopeShape& s,
                   KernelScratch* scratch) {
  rope_pack_qkv_isa(best_vector_isa(), q, k, v, qkv, s, scratch);
}

void rope_pack_qkv_backward(const uint16_t* dqkv, uint16_t* dq, uint16_t* dk, uint16_t* dv, const RopeShape& s,
                            KernelScratch* scratch) {
  rope_pack_qkv_backward_isa(best_vector_isa(), dqkv, dq, dk, dv, s, scratch);
}

}  // namespace cleave::kernels::cpu
