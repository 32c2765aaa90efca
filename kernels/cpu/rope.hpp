// Rotary position embedding (Hugging Face "rotate_half" layout) fused with packing into the attention core's
// qkv layout (ops.hpp: q | k | v blocks of Hq·hd, P·hd and P·hd columns).
//
// q [B, T, Hq·hd], k and v [B, T, Hkv·hd]. qkv [B, T, (Hq + 2P)·hd] with P packed key/value heads, Hkv (grouped)
// or Hq (repeated), r = P / Hkv: query head h = rope(q head h), key head j = rope(k head j / r), value head
// j = v head j / r. For i < hd/2, with
//   inv_freq_i = 1 / theta^(2i / hd)   and   angle = (position_offset + t) · inv_freq_i,
// both in f32 exactly as transformers' LlamaRotaryEmbedding computes them (f32 pow, f32 product),
//   out[i] = x[i] cos - x[i + hd/2] sin,   out[i + hd/2] = x[i + hd/2] cos + x[i] sin.
// Invariant: forward writes qkv completely; backward overwrites dq, dk, dv completely: the rotation undone
// (its transpose) and each key/value head the sum of its r packed copies, summed in head order before the
// rotation is undone (deterministic; r = 1 copies it bit for bit).
//
// scratch: where a call builds its cos/sin table and (bf16) converts its rows (kernel_scratch.hpp): the run's, so
// a steady-state call allocates nothing; null (tests, benchmarks) = one made for the call. Never changes a bit.
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel_scratch.hpp"
#include "kernels/cpu/vector_isa.hpp"

namespace cleave::kernels::cpu {

struct RopeShape {
  int64_t batch = 0, seq = 0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;  // Hkv divides Hq, head_dim even
  float theta = 10000.0f;
  int64_t position_offset = 0;
  int64_t packed_kv_heads = 0;  // P: kv_heads (grouped) or q_heads (repeated); 0 means q_heads
};

// inv_freq_i (f32), the frequency of rotation pair i < head_dim / 2.
float rope_inv_freq(int64_t i, int64_t head_dim, float theta);
// The angle of pair i at sequence position t (f32 product, as transformers).
float rope_angle(int64_t t, int64_t i, const RopeShape& s);

void rope_pack_qkv(const float* q, const float* k, const float* v, float* qkv, const RopeShape& s,
                   KernelScratch* scratch = nullptr);
void rope_pack_qkv_backward(const float* dqkv, float* dq, float* dk, float* dv, const RopeShape& s,
                            KernelScratch* scratch = nullptr);

// bf16 tensors (bit patterns, cast.hpp), converted a row at a time: the bits of widening every input to f32
// (exact), running the f32 functions above and narrowing every output once (round to nearest even).
void rope_pack_qkv(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* qkv, const RopeShape& s,
                   KernelScratch* scratch = nullptr);
void rope_pack_qkv_backward(const uint16_t* dqkv, uint16_t* dq, uint16_t* dk, uint16_t* dv, const RopeShape& s,
                            KernelScratch* scratch = nullptr);

// One vector path (vector_isa.hpp); the functions above run the widest, all giving the same bits. For tests and
// benchmarks.
void rope_pack_qkv_isa(VectorIsa isa, const float* q, const float* k, const float* v, float* qkv,
                       const RopeShape& s, KernelScratch* scratch = nullptr);
void rope_pack_qkv_backward_isa(VectorIsa isa, const float* dqkv, float* dq, float* dk, float* dv,
                                const RopeShape& s, KernelScratch* scratch = nullptr);
void rope_pack_qkv_isa(VectorIsa isa, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* qkv,
                       const RopeShape& s, KernelScratch* scratch = nullptr);
void rope_pack_qkv_backward_isa(VectorIsa isa, const uint16_t* dqkv, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                                const RopeShape& s, KernelScratch* scratch = nullptr);

}  // namespace cleave::kernels::cpu
