// The probabilities path of causal multi-head self-attention (llm.c layout), built on batched GEMMs: the
// REFERENCE that the memory-efficient kernel (flash_attention.hpp) is tested and benchmarked against; no
// op of the seam calls it.
//
// qkv is [B, T, 3C] with C = H * hd: q = columns [0, C), k = [C, 2C), v = [2C, 3C); head h uses columns
// h*hd .. (h+1)*hd inside each third. out is [B, T, C] (heads concatenated, same column layout as q).
// probs is [B, H, T, T]: the saved softmax of (q k^T) / sqrt(hd) with the causal mask; entries above
// the diagonal are written as 0. Invariant: forward writes out and probs completely; backward overwrites
// dqkv completely and uses dprobs_workspace ([B, H, T, T], caller-provided) as scratch.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.hpp"

namespace cleave::kernels::cpu {

// slicing: how the batched GEMMs inside are cut over threads (gemm.hpp; kShapeFixed in deterministic mode).
void attention_probs_forward(const float* qkv, float* out, float* probs, int64_t B, int64_t T, int64_t H, int64_t hd,
                       GemmSlicing slicing = GemmSlicing::kPerThread);

void attention_probs_backward(const float* dout, const float* qkv, const float* probs, float* dqkv, float* dprobs_workspace,
                        int64_t B, int64_t T, int64_t H, int64_t hd, GemmSlicing slicing = GemmSlicing::kPerThread);

}  // namespace cleave::kernels::cpu
