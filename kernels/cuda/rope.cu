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

// P, the key / value heads packed into qkv: the shape's, or Hq (the repeated layout) when unset.
__device__ __forceinline__ int64_t packed_heads(const RopeShape& shape) {
  return shape.packed_kv_heads > 0 ? shape.packed_kv_heads : shape.q_heads;
}

__global__ void rope_pack_qkv_kernel(ConstFloats q, ConstFloats k, ConstFloats v, Floats qkv, RopeShape shape) {
  const int64_t half = shape.head_dim / 2;
  const int64_t packed = packed_heads(shape);     // P key / value heads in qkv
  const int64_t copies = packed / shape.kv_heads;  // of each kv head
  const int64_t q_width = shape.q_heads * shape.head_dim;
  const int64_t p_width = packed * shape.head_dim;
  const int64_t width = q_width + 2 * p_width;
  const int64_t kv_width = shape.kv_heads * shape.head_dim;
  const int64_t n = shape.batch * shape.seq * shape.q_heads * half;
  for (int64_t p = global_thread(); p < n; p += grid_threads()) {
    const int64_t i = p % half;
    const int64_t h = (p / half) % shape.q_heads;
    const int64_t bt = p / (half * shape.q_heads);
    const int64_t t = bt % shape.seq;
    float c = 0.0f;
    float s = 0.0f;
    rope_cos_sin(shape.position_offset + t, i, shape.head_dim, shape.theta, &c, &s);
    const int64_t q_at = bt * q_width + h * shape.head_dim + i;
    const int64_t out_at = bt * width + h * shape.head_dim + i;
    const float q0 = load(q, q_at), q1 = load(q, q_at + half);
    store(qkv, out_at, q0 * c - q1 * s);
    store(qkv, out_at + half, q1 * c + q0 * s);
    if (h >= packed) continue;  // grouped: only the first Hkv threads of a row write key / value heads
    const int64_t kv_at = bt * kv_width + (h / copies) * shape.head_dim + i;
    const float k0 = load(k, kv_at), k1 = load(k, kv_at + half);
    store(qkv, out_at + q_width, k0 * c - k1 * s);
    store(qkv, out_at + q_width + half, k1 * c + k0 * s);
    store(qkv, out_at + q_width + p_width, load(v, kv_at));
    store(qkv, out_at + q_width + p_width + half, load(v, kv_at + half));
  }
}

// The inverse rotation (the transpose): x[i] = o[i] cos + o[i + hd/2] sin, x[i + hd/2] = o[i + hd/2] cos - o[i] sin.
__global__ void rope_pack_qkv_backward_kernel(ConstFloats dqkv, Floats dq, Floats dk, Floats dv, RopeShape shape) {
  const int64_t half = shape.head_dim / 2;
  const int64_t group = shape.q_heads / shape.kv_heads;
  const int64_t packed = packed_heads(shape);
  const int64_t copies = packed / shape.kv_heads;
  const int64_t q_width = shape.q_heads * shape.head_dim;
  const int64_t p_width = packed * shape.head_dim;
  const int64_t width = q_width + 2 * p_width;
  const int64_t kv_width = shape.kv_heads * shape.head_dim;
  const int64_t n = shape.batch * shape.seq * shape.kv_heads * half;
  for (int64_t p = global_thread(); p < n; p += grid_threads()) {
    const int64_t i = p % half;
    const int64_t j = (p / half) % shape.kv_heads;
    const int64_t bt = p / (half * shape.kv_heads);
    const int64_t t = bt % shape.seq;
    float c = 0.0f;
    float s = 0.0f;
    rope_cos_sin(shape.position_offset + t, i, shape.head_dim, shape.theta, &c, &s);
    for (int64_t m = 0; m < group; ++m) {
      const int64_t h = j * group + m;
      const int64_t in_at = bt * width + h * shape.head_dim + i;
      const float o0 = load(dqkv, in_at), o1 = load(dqkv, in_at + half);
      const int64_t q_at = bt * q_width + h * shape.head_dim + i;
      store(dq, q_at, o0 * c + o1 * s);
      store(dq, q_at + half, o1 * c - o0 * s);
    }
    float k0 = 0.0f, k1 = 0.0f, v0 = 0.0f, v1 = 0.0f;
    for (int64_t m = 0; m < copies; ++m) {  // the packed copies of kv head j, in head order
      const int64_t in_at = bt * width + q_width + (j * copies + m) * shape.head_dim + i;
      k0 += load(dqkv, in_at);
      k1 += load(dqkv, in_at + half);
      v0 += load(dqkv, in_at + p_width);
      v1 += load(dqkv, in_at + p_width + half);
    }
    const int64_t kv_at = bt * kv_width + j * shape.head_dim + i;
    store(dk, kv_at, k0 * c + k1 * s);
    store(dk, kv_at + half, k1 * c - k0 * s);
    store(dv, kv_at, v0);
    store(dv, kv_at + half, v1);
  }
}

}  // namespace

cudaError_t launch_rope_pack_qkv(ConstFloats q, ConstFloats k, ConstFloats v, Floats qkv, RopeShape shape,
                                 cudaStream_t stream) {
  const int64_t n = shape.batch * shape.seq * shape.q_heads * (shape.head_dim / 2);
  if (n == 0) return cudaSuccess;
  rope_pack_qkv_kernel<<<grid_for(n), kThreads, 0, stream>>>(q, k, v, qkv, shape);
  return cudaGetLastError();
}

cudaError_t launch_rope_pack_qkv_backward(ConstFloats dqkv, Floats dq, Floats dk, Floats dv, RopeShape shape,
                                          cudaStream_t stream) {
  const int64_t n = shape.batch * shape.seq * shape.kv_heads * (shape.head_dim / 2);
  if (n == 0) return cudaSuccess;
  rope_pack_qkv_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(dqkv, dq, dk, dv, shape);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
