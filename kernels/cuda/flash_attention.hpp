// Memory-efficient multi-head attention on the GPU (the CUDA side of ops::attention_*; the CPU twin is
// kernels/cpu/flash_attention.hpp, the math in docs/ops.md "Attention"). FlashAttention-2's algorithm, written
// for this engine as plain SIMT kernels (no tensor cores, no cuDNN): the forward keeps out and the f32 log-sum-
// exp per row, never the [T, T] probabilities; the backward recomputes them in two kernels, one per output
// side, so every output element has one writer and no atomics are needed (the bits do not depend on timing).
//
// Kernels (flash_attention.cu), each a block of 8 warps:
//  - forward: one warp per query row, K/V tiles of 32 keys staged in shared memory as f32, lane j scores key j,
//    the online-softmax update per tile, lane d accumulates output dims d, d + 32, ... (head_dim <= 128);
//  - backward dot: D = rowsum(dout * out) per row into the caller's f32 workspace;
//  - backward dq: as the forward, recomputing p = exp(s - lse) and ds = p (dp - D) scale per key;
//  - backward dk/dv: 16 keys per block (2 per warp, held in registers), query rows streamed through shared
//    memory 8 at a time, over every query head of the kv head's group.
// Layout: as the CPU's (row strides ld_*, pointers at head 0's column, batch stride len * ld). Every tensor
// has one FloatType (f32 or bf16 storage, f32 arithmetic); lse and D are f32. Launch on `stream`, no host wait;
// device pointers owned by the caller; the workspace comes from the caller.
//
// Status: compiled for sm_80 and sm_90 with CLEAVE_CUDA_STRICT; not run on a GPU (tests/gpu/ops has the parity
// tests that would check it against the CPU).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/float_type.hpp"

namespace cleave::kernels::cuda {

struct FlashAttentionShape {
  int64_t batch = 0, q_len = 0, kv_len = 0;
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ld_q = 0, ld_k = 0, ld_v = 0, ld_o = 0;
  int64_t q_offset = 0, k_offset = 0, window = 0;
  bool causal = true;
  float scale = 1.0f;
};

inline constexpr int64_t kFlashMaxHeadDim = 128;

// Whether these kernels serve the shape (head_dim <= kFlashMaxHeadDim); the seam names the limit otherwise.
bool flash_attention_can_implement(const FlashAttentionShape& shape);
// Backward workspace (bytes): D, f32 [batch, q_heads, q_len].
std::size_t flash_attention_backward_workspace_size(const FlashAttentionShape& shape);

void flash_attention_forward(FloatType type, const void* q, const void* k, const void* v, void* out, float* lse,
                             const FlashAttentionShape& shape, cudaStream_t stream);
// accumulate: dq, dk, dv += instead of =.
void flash_attention_backward(FloatType type, const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* dout, void* dq, void* dk, void* dv,
                              const FlashAttentionShape& shape, bool accumulate, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream);
// ops::attention_merge: out [batch, len, heads * head_dim], lse [batch, heads, len]; out may alias out_a / out_b.
void attention_merge(FloatType type, const void* out_a, const float* lse_a, const void* out_b, const float* lse_b,
                     void* out, float* lse, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                     cudaStream_t stream);

namespace detail {
cudaError_t launch_flash_forward(FloatType type, const void* q, const void* k, const void* v, void* out, float* lse,
                                 const FlashAttentionShape& shape, cudaStream_t stream);
cudaError_t launch_flash_backward(FloatType type, const void* q, const void* k, const void* v, const void* out,
                                  const float* lse, const void* dout, void* dq, void* dk, void* dv,
                                  const FlashAttentionShape& shape, bool accumulate, float* d_rows,
                                  cudaStream_t stream);
cudaError_t launch_attention_merge(FloatType type, const void* out_a, const float* lse_a, const void* out_b,
                                   const float* lse_b, void* out, float* lse, int64_t batch, int64_t len,
                                   int64_t heads, int64_t head_dim, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
