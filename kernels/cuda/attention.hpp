// Causal multi-head self-attention core on the GPU (twin of kernels/cpu/attention.hpp), over strided-batched
// cuBLASLt GEMMs and the fused causal softmax kernels of softmax.hpp.
//
// Layout (the seam's, ops.hpp): qkv [B, T, 3C] with q | k | v and head h at columns h*hd of each third; out
// [B, T, C]; probs [B, H, T, T], the saved causal softmax (exact zeros above the diagonal); dqkv [B, T, 3C] is
// overwritten. Per batch entry b, one GEMM per product batched over the H heads: head h of Q, K, V is read in
// place through the row stride 3C (leading dimension) and the head stride hd (batch stride), no permute copies.
//   forward:  S = Q K^T;  P = causal_softmax(S / sqrt(hd));  O = P V
//   backward: dP = dO V^T;  dV = P^T dO;  dS = P * (dP - rowsum(P * dP)) / sqrt(hd);  dQ = dS K;  dK = dS^T Q
// Numerics: every tensor has one dtype, f32 or bf16. S and dP are f32 GEMM outputs (f32 accumulation), the
// softmax and its statistics are f32; for bf16, P is stored once rounded (probs) and O = P V reads it, and dS is
// rounded to bf16 before the dQ/dK GEMMs (the CPU keeps both in f32: the difference is one bf16 rounding).
// Memory: probs is B*H*T*T, the workspace H*T*T per call (reused over b); see docs/cuda.md.
// Launch on `stream`, no host wait; allocates nothing (workspaces from the caller).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/core/dtype.hpp"
#include "kernels/cuda/gemm.hpp"

namespace cleave::kernels::cuda {

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// Workspace (bytes): forward: f32 scores [H, T, T] for bf16 (f32 scores go straight into probs);
// backward: f32 dP [H, T, T], plus bf16 dS [H, T, T] for bf16.
std::size_t attention_forward_workspace_size(const AttentionShape& shape, DType dtype);
std::size_t attention_backward_workspace_size(const AttentionShape& shape, DType dtype);

// gemm_workspace: as for gemm() (256-byte aligned; gemm_workspace_size bytes recommended).
void attention_forward(GemmContext& gemm_context, DType dtype, const void* qkv, void* out, void* probs,
                       const AttentionShape& shape, void* workspace, std::size_t workspace_bytes, void* gemm_workspace,
                       std::size_t gemm_workspace_bytes, cudaStream_t stream);
void attention_backward(GemmContext& gemm_context, DType dtype, const void* dout, const void* qkv, const void* probs,
                        void* dqkv, const AttentionShape& shape, void* workspace, std::size_t workspace_bytes,
                        void* gemm_workspace, std::size_t gemm_workspace_bytes, cudaStream_t stream);

}  // namespace cleave::kernels::cuda
