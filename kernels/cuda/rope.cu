// RoPE + packing kernels (rope.hpp). One thread per rotation pair (i, i + hd/2): forward over [B, T, Hq, hd/2],
// writing the pair of query head h and, for h < P, of packed key head h and value head h; backward over
// [B, T, Hkv, hd/2], writing the pair of the g query heads of kv head j, of key head j and of value head j (the
// sum of its P / Hkv packed copies), so every output element has exactly one writer and no atomics are needed. i is the
// fastest index: neighbouring threads touch neighbouring columns.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

// inv_freq_i = 1 / theta^(2i/hd): the exponent rounded to f32 as torch's arange(0, hd, 2).float() / hd, the power
// computed in double and rounded once to f32 (a correctly rounded powf, as glibc's is in practice), the
// reciprocal in f32. Then angle = f32(position) * inv_freq (both f32, transformers' freqs).
// cos and sin of the f32 angle go through sincospi in double on the angle in half-turns: its argument reduction
// is exact, so no Payne-Hanek slow path (sincosf's keeps a local-memory table in every thread, which the
// resource check refuses). The half-turns carry an absolute error below |angle| 2^-52 (2e-10 at angle 1e6), far
// under an f32 ulp of the results, so both end within one ulp of glibc's sinf / cosf on the CPU (a model of it
// on the CPU, positions 0-8191 x 64 frequencies of theta 1e4: 1.3% of 2^20 values one ulp apart, none more).
__device__ __forceinline__ void rope_cos_sin(int64_t position, int64_t i, int64_t head_dim, float theta, float* c,
                                             float* s) {
  const float exponent = __fdiv_rn(static_cast<float>(2 * i), static_cast<float>(head_dim));
  const float power = static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(exponent)));
  const float inv_freq = __fdiv_rn(1.0f, power);
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq);
  constexpr double kInvPi = 0.318309886183790671538;  // 1 / pi, rounded to double
  double sd = 0.0;
  double cd = 0.0;
  sincospi(static_cast<double>(angle) * kInvPi, &sd, &cd);
  *s = static_cast<float>(sd);
  *c = static_cast<float>(cd);
}

// Where a row's heads sit in qkv: P packed key / value heads (the shape's, or Hq, the repeated layout, when unset),
// `copies` of each kv head, and the widths of the query block, of the packed key (or value) block, of a qkv row and
// of a k or v row.
struct PackedLayout {
  int64_t half = 0;  // hd / 2, the rotation pairs of a head
  int64_t packed = 0;
  int64_t copies = 0;
  int64_t q_width = 0;
  int64_t p_width = 0;
  int64_t width = 0;
  int64_t kv_width = 0;
};

__device__ __forceinline__ PackedLayout packed_layout(const RopeShape& shape) {
  PackedLayout l;
  l.half = shape.head_dim / 2;
  l.packed = shape.packed_kv_heads > 0 ? shape.packed_kv_heads : shape.q_heads;
  l.copies = l.packed / shape.kv_heads;
  l.q_width = shape.q_heads * shape.head_dim;
  l.p_width = l.packed * shape.head_dim;
  l.width = l.q_width + 2 * l.p_width;
  l.kv_width = shape.kv_heads * shape.head_dim;
  return l;
}

// Rotation pair p of [B, T, heads, hd/2] (i fastest): its column i, its head, its row bt = b T + t, and the cos and
// sin of its angle.
struct RotationPair {
  int64_t i = 0;
  int64_t head = 0;
  int64_t bt = 0;
  float c = 0.0f;
  float s = 0.0f;
};

__device__ __forceinline__ RotationPair rotation_pair(int64_t p, int64_t heads, const RopeShape& shape) {
  const int64_t half = shape.head_dim / 2;
  RotationPair r;
  r.i = p % half;
  r.head = (p / half) % heads;
  r.bt = p / (half * heads);
  rope_cos_sin(shape.position_offset + r.bt % shape.seq, r.i, shape.head_dim, shape.theta, &r.c, &r.s);
  return r;
}

__global__ void rope_pack_qkv_kernel(ConstFloats q, ConstFloats k, ConstFloats v, Floats qkv, RopeShape shape) {
  const PackedLayout l = packed_layout(shape);
  const int64_t n = shape.batch * shape.seq * shape.q_heads * l.half;
  for (int64_t p = global_thread(); p < n; p += grid_threads()) {
    const RotationPair r = rotation_pair(p, shape.q_heads, shape);
    const int64_t h = r.head;
    const int64_t q_at = r.bt * l.q_width + h * shape.head_dim + r.i;
    const int64_t out_at = r.bt * l.width + h * shape.head_dim + r.i;
    const float q0 = load(q, q_at), q1 = load(q, q_at + l.half);
    store(qkv, out_at, q0 * r.c - q1 * r.s);
    store(qkv, out_at + l.half, q1 * r.c + q0 * r.s);
    if (h >= l.packed) continue;  // grouped: only the first Hkv threads of a row write key / value heads
    const int64_t kv_at = r.bt * l.kv_width + (h / l.copies) * shape.head_dim + r.i;
    const float k0 = load(k, kv_at), k1 = load(k, kv_at + l.half);
    store(qkv, out_at + l.q_width, k0 * r.c - k1 * r.s);
    store(qkv, out_at + l.q_width + l.half, k1 * r.c + k0 * r.s);
    store(qkv, out_at + l.q_width + l.p_width, load(v, kv_at));
    store(qkv, out_at + l.q_width + l.p_width + l.half, load(v, kv_at + l.half));
  }
}

// The inverse rotation (the transpose): x[i] = o[i] cos + o[i + hd/2] sin, x[i + hd/2] = o[i + hd/2] cos - o[i] sin.
__global__ void rope_pack_qkv_backward_kernel(ConstFloats dqkv, Floats dq, Floats dk, Floats dv, RopeShape shape) {
  const PackedLayout l = packed_layout(shape);
  const int64_t group = shape.q_heads / shape.kv_heads;
  const int64_t n = shape.batch * shape.seq * shape.kv_heads * l.half;
  for (int64_t p = global_thread(); p < n; p += grid_threads()) {
    const RotationPair r = rotation_pair(p, shape.kv_heads, shape);
    const int64_t j = r.head;
    for (int64_t m = 0; m < group; ++m) {
      const int64_t h = j * group + m;
      const int64_t in_at = r.bt * l.width + h * shape.head_dim + r.i;
      const float o0 = load(dqkv, in_at), o1 = load(dqkv, in_at + l.half);
      const int64_t q_at = r.bt * l.q_width + h * shape.head_dim + r.i;
      store(dq, q_at, o0 * r.c + o1 * r.s);
      store(dq, q_at + l.half, o1 * r.c - o0 * r.s);
    }
    float k0 = 0.0f, k1 = 0.0f, v0 = 0.0f, v1 = 0.0f;
    for (int64_t m = 0; m < l.copies; ++m) {  // the packed copies of kv head j, in head order
      const int64_t in_at = r.bt * l.width + l.q_width + (j * l.copies + m) * shape.head_dim + r.i;
      k0 += load(dqkv, in_at);
      k1 += load(dqkv, in_at + l.half);
      v0 += load(dqkv, in_at + l.p_width);
      v1 += load(dqkv, in_at + l.p_width + l.half);
    }
    const int64_t kv_at = r.bt * l.kv_width + j * shape.head_dim + r.i;
    store(dk, kv_at, k0 * r.c + k1 * r.s);
    store(dk, kv_at + l.half, k1 * r.c - k0 * r.s);
    store(dv, kv_at, v0);
    store(dv, kv_at + l.half, v1);
  }
}

}  // namespace

cudaError_t launch_rope_pack_qkv(ConstFloats q, ConstFloats k, ConstFloats v, Floats qkv, RopeShape shape,
                                 cudaStream_t stream) {
  const int64_t n = shape.batch * shape.seq * shape.q_heads * (shape.head_dim / 2);
  return launch_grid_stride(rope_pack_qkv_kernel, n, stream, q, k, v, qkv, shape);
}

cudaError_t launch_rope_pack_qkv_backward(ConstFloats dqkv, Floats dq, Floats dk, Floats dv, RopeShape shape,
                                          cudaStream_t stream) {
  const int64_t n = shape.batch * shape.seq * shape.kv_heads * (shape.head_dim / 2);
  return launch_grid_stride(rope_pack_qkv_backward_kernel, n, stream, dqkv, dq, dk, dv, shape);
}

}  // namespace cleave::kernels::cuda::detail
