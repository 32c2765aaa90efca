// Causal multi-head attention core over batched GEMMs. See attention_probs.hpp.
//
// Per (batch b, head h), with Q, K, V the [T, hd] column blocks of qkv (row stride 3C):
//   forward:  S = Q K^T / sqrt(hd); P = causal_softmax(S); O = P V
//   backward: dP = dO V^T; dV = P^T dO; dS = P * (dP - rowsum(P * dP)) / sqrt(hd); dQ = dS K; dK = dS^T Q
// The full T x T products are computed (the masked half is ~2x the minimal flops) because one large
// GEMM beats T small ones; P and dS are exactly 0 above the diagonal, so the masked half contributes 0.
#include "kernels/cpu/attention_probs.hpp"

#include <cmath>

#include "engine/core/error.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/vec_math.hpp"

namespace cleave::kernels::cpu {
namespace {

void check_attention(const char* op, int64_t B, int64_t T, int64_t H, int64_t hd) {
  CLEAVE_ASSERT(B >= 0 && T >= 0 && H > 0 && hd > 0, "{}: bad shape B={} T={} H={} hd={}", op, B, T, H, hd);
}

}  // namespace

void attention_probs_forward(const float* qkv, float* out, float* probs, int64_t B, int64_t T, int64_t H, int64_t hd,
                       GemmSlicing slicing) {
  check_attention("attention_forward", B, T, H, hd);
  const int64_t C = H * hd;
  const int64_t ld_qkv = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv + b * T * ld_qkv;
    // S[h] = scale * Q_h K_h^T, batched over heads (head h is a column offset h*hd).
    gemm_strided_batched(false, true, T, T, hd, scale, q, ld_qkv, hd, q + C, ld_qkv, hd, 0.0f, probs + b * H * T * T, T,
                         T * T, H, slicing);
  }
  // Causal softmax of each row t over columns [0, t]; the masked columns are written as exact zeros.
  const int64_t n_rows = B * H * T;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n_rows * T / 2))
  for (int64_t row = 0; row < n_rows; ++row) {
    const int64_t t = row % T;
    float* p = probs + row * T;
    const float mx = detail::max_of(p, t + 1);
    const float sum = detail::exp_store_sum(p, mx, p, t + 1);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j <= t; ++j) p[j] *= inv;
    for (int64_t j = t + 1; j < T; ++j) p[j] = 0.0f;
  }
  for (int64_t b = 0; b < B; ++b) {
    // O_h = P_h V_h, written straight into the head's column block of out.
    gemm_strided_batched(false, false, T, hd, T, 1.0f, probs + b * H * T * T, T, T * T, qkv + b * T * ld_qkv + 2 * C,
                         ld_qkv, hd, 0.0f, out + b * T * C, C, hd, H, slicing);
  }
}

void attention_probs_backward(const float* dout, const float* qkv, const float* probs, float* dqkv, float* dprobs_workspace,
                        int64_t B, int64_t T, int64_t H, int64_t hd, GemmSlicing slicing) {
  check_attention("attention_backward", B, T, H, hd);
  const int64_t C = H * hd;
  const int64_t ld_qkv = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv + b * T * ld_qkv;
    const float* p = probs + b * H * T * T;
    const float* dout_b = dout + b * T * C;
    float* dq = dqkv + b * T * ld_qkv;
    float* dp = dprobs_workspace + b * H * T * T;
    // dP_h = dO_h V_h^T
    gemm_strided_batched(false, true, T, T, hd, 1.0f, dout_b, C, hd, q + 2 * C, ld_qkv, hd, 0.0f, dp, T, T * T, H, slicing);
    // dV_h = P_h^T dO_h
    gemm_strided_batched(true, false, T, hd, T, 1.0f, p, T, T * T, dout_b, C, hd, 0.0f, dq + 2 * C, ld_qkv, hd, H, slicing);
  }
  // dS = P * (dP - rowsum(P * dP)) * scale, in place in the workspace (exact zeros above the diagonal).
  const int64_t n_rows = B * H * T;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n_rows * T / 2))
  for (int64_t row = 0; row < n_rows; ++row) {
    const int64_t t = row % T;
    const float* pr = probs + row * T;
    float* ds = dprobs_workspace + row * T;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j <= t; ++j) dot += pr[j] * ds[j];
#pragma omp simd
    for (int64_t j = 0; j <= t; ++j) ds[j] = pr[j] * (ds[j] - dot) * scale;
    for (int64_t j = t + 1; j < T; ++j) ds[j] = 0.0f;
  }
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv + b * T * ld_qkv;
    const float* ds = dprobs_workspace + b * H * T * T;
    float* dq = dqkv + b * T * ld_qkv;
    // dQ_h = dS_h K_h; dK_h = dS_h^T Q_h
    gemm_strided_batched(false, false, T, hd, T, 1.0f, ds, T, T * T, q + C, ld_qkv, hd, 0.0f, dq, ld_qkv, hd, H, slicing);
    gemm_strided_batched(true, false, T, hd, T, 1.0f, ds, T, T * T, q, ld_qkv, hd, 0.0f, dq + C, ld_qkv, hd, H, slicing);
  }
}

}  // namespace cleave::kernels::cpu
