// Fused softmax cross-entropy kernels (cross_entropy.hpp). Forward: each thread keeps an online (max, sum of
// exp) pair over its strided columns, and the block merges the pairs in a fixed tree; one read of the row.
// Backward: one more read of the row, each element written by the thread that read it (aliasing-safe).
#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

unsigned int row_grid(int64_t rows) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 16;
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows > kMaxBlocks ? kMaxBlocks : rows));
}

__device__ __forceinline__ bool target_ok(int32_t t, int64_t classes) { return t >= -1 && t < classes; }

// (m1, s1) + (m2, s2) as one (max, sum of exp(x - max)); an empty pair is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;
  // s * 0 rather than 0 for an empty side: a NaN already in s must survive.
  s = (m == -INFINITY ? s * 0.0f : s * expf(m - mx)) + (m2 == -INFINITY ? s2 * 0.0f : s2 * expf(m2 - mx));
  m = mx;
}

__global__ void cross_entropy_forward_kernel(const float* logits, const int32_t* targets, float* lse, uint32_t* bad_row,
                                             int64_t rows, int64_t classes, double* row_losses) {
  __shared__ float shared_m[kThreads];
  __shared__ float shared_s[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * classes;
    float m = -INFINITY;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
      const float v = x[c];
      if (v > m) {
        s = (m == -INFINITY ? s * 0.0f : s * expf(m - v)) + 1.0f;  // keeps a NaN seen before the first max
        m = v;
      } else if (v != -INFINITY) {
        s += expf(v - m);  // a NaN v propagates through s; -inf adds nothing (and -inf - -inf is NaN)
      }
    }
    shared_m[threadIdx.x] = m;
    shared_s[threadIdx.x] = s;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
      if (static_cast<int>(threadIdx.x) < stride) {
        float mm = shared_m[threadIdx.x];
        float ss = shared_s[threadIdx.x];
        merge(mm, ss, shared_m[threadIdx.x + stride], shared_s[threadIdx.x + stride]);
        shared_m[threadIdx.x] = mm;
        shared_s[threadIdx.x] = ss;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const float row_lse = shared_m[0] + logf(shared_s[0]);
      lse[r] = row_lse;
      const int32_t t = targets[r];
      double loss = 0.0;
      if (!target_ok(t, classes)) {
        atomicMin(bad_row, static_cast<uint32_t>(r));
      } else if (t >= 0) {
        loss = static_cast<double>(row_lse) - static_cast<double>(x[t]);
      }
      row_losses[r] = loss;
    }
    __syncthreads();
  }
}

__global__ void sum_rows_kernel(const double* row_losses, int64_t rows, double* loss_sum) {
  __shared__ double scratch[kThreads];
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) acc += row_losses[r];
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) *loss_sum = total;
}

__global__ void cross_entropy_backward_kernel(const float* logits, const int32_t* targets, const float* lse,
                                              float scale, float* dlogits, uint32_t* bad_row, int64_t rows,
                                              int64_t classes) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * classes;
    float* dx = dlogits + r * classes;
    const int32_t t = targets[r];
    const bool ok = target_ok(t, classes);
    if (!ok && threadIdx.x == 0) atomicMin(bad_row, static_cast<uint32_t>(r));
    if (!ok || t < 0) {
      for (int64_t c = threadIdx.x; c < classes; c += kThreads) dx[c] = 0.0f;
      continue;
    }
    const float row_lse = lse[r];
    for (int64_t c = threadIdx.x; c < classes; c += kThreads) {
      const float p = expf(x[c] - row_lse);
      dx[c] = scale * (c == t ? p - 1.0f : p);
    }
  }
}

}  // namespace

cudaError_t launch_softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse,
                                                 double* loss_sum, uint32_t* bad_row, int64_t rows, int64_t classes,
                                                 double* row_losses, cudaStream_t stream) {
  if (rows > 0) {
    cross_entropy_forward_kernel<<<row_grid(rows), kThreads, 0, stream>>>(logits, targets, lse, bad_row, rows, classes,
                                                                          row_losses);
  }
  sum_rows_kernel<<<1, kThreads, 0, stream>>>(row_losses, rows, loss_sum);
  return cudaGetLastError();
}

cudaError_t launch_softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                                                  float scale, float* dlogits, uint32_t* bad_row, int64_t rows,
                                                  int64_t classes, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  cross_entropy_backward_kernel<<<row_grid(rows), kThreads, 0, stream>>>(logits, targets, lse, scale, dlogits, bad_row,
                                                                         rows, classes);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
