// Rotary position embedding with grouped-query packing on the GPU (the CUDA side of ops::rope_pack_qkv and
// rope_pack_qkv_backward; the CPU twin is the CPU backend's slot).
//
// Layout (ops.hpp): q [B, T, Hq*hd], k and v [B, T, Hkv*hd] -> qkv [B, T, (Hq + 2P)*hd] (q | k | v blocks of Hq,
// P and P heads, head h at columns h*hd of its block, attention_forward's layout) with P = Hkv (grouped) or Hq
// (repeated), r = P / Hkv; query head h is rope(q head h), key head j is rope(k head j/r), value head j is
// v head j/r. rope is Hugging Face's rotate_half: for i < hd/2,
// out[i] = x[i] cos - x[i + hd/2] sin, out[i + hd/2] = x[i + hd/2] cos + x[i] sin, angle = f32(position) *
// inv_freq_i with inv_freq_i = 1 / theta^(f32(2i) / f32(hd)) in f32 (the power correctly rounded to f32, as the
// CPU's powf gives it), position = position_offset + t.
//
// Invariant: forward writes every element of qkv; backward overwrites dq, dk and dv: dq head h = rope^-1 of
// dqkv's query head h; dk head j = rope^-1 of the sum over the r packed key heads j*r .. j*r+r-1 of dqkv, added
// in head order in f32; dv head j = that sum of dqkv's value heads. No atomics: one thread owns
// each output pair. Every tensor is an f32 or bf16 view (floats.hpp: f32 arithmetic, one rounding per store).
// Launch on `stream`, no host wait; device pointers owned by the caller; outputs do not alias inputs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

struct RopeShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t q_heads = 0;   // Hq
  int64_t kv_heads = 0;  // Hkv, divides Hq
  int64_t head_dim = 0;  // hd, even
  float theta = 10000.0f;
  int64_t position_offset = 0;
  int64_t packed_kv_heads = 0;  // P: kv_heads (grouped) or q_heads (repeated); 0 means q_heads
};

void rope_pack_qkv(ConstFloats q, ConstFloats k, ConstFloats v, Floats qkv, const RopeShape& shape,
                   cudaStream_t stream);
void rope_pack_qkv_backward(ConstFloats dqkv, Floats dq, Floats dk, Floats dv, const RopeShape& shape,
                            cudaStream_t stream);

namespace detail {
cudaError_t launch_rope_pack_qkv(ConstFloats q, ConstFloats k, ConstFloats v, Floats qkv, RopeShape shape,
                                 cudaStream_t stream);
cudaError_t launch_rope_pack_qkv_backward(ConstFloats dqkv, Floats dq, Floats dk, Floats dv, RopeShape shape,
                                          cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
