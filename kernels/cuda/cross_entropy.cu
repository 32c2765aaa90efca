// Softmax cross-entropy kernels (cross_entropy.hpp). One block of kThreads per row: a fixed-tree max over the
// row's valid columns, then a fixed-tree sum of exp(x - max) (two reads of the row, as the CPU kernel), then
// thread 0 finishes the row. Row losses are summed in double by one block in a fixed tree. The backward reads
// each element once and writes it from the same thread (in place over the logits is safe).
#include <cfloat>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/cuda/float_io.cuh"
#include "kernels/cuda/index_status.cuh"

namespace cleave::kernels::cuda::detail {
namespace {

unsigned int row_grid(int64_t rows) {
  return static_cast<unsigned int>(launch::block_per_row(rows, kThreads).grid.x);
}

__device__ __forceinline__ bool target_ok(int32_t t, int64_t vocab) { return t >= -1 && t < vocab; }

// Max over the block through `scratch` (kThreads entries), returned to every thread; ends with a barrier.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();
  return total;
}

__device__ __forceinline__ long long block_min(long long v, long long* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const long long other = scratch[threadIdx.x + stride];
      if (other < scratch[threadIdx.x]) scratch[threadIdx.x] = other;
    }
    __syncthreads();
  }
  const long long total = scratch[0];
  __syncthreads();
  return total;
}

template <typename T>
__device__ __forceinline__ float row_max_of(const T* x, int64_t valid, float* scratch) {
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < valid; c += kThreads) m = fmaxf(m, load(x, c));
  return block_max(m, scratch);
}

template <typename T>
__device__ __forceinline__ float row_sum_exp(const T* x, int64_t valid, float shift, float* scratch) {
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < valid; c += kThreads) s += expf(load(x, c) - shift);
  return block_sum(s, scratch);
}

template <typename T>
__global__ void forward_kernel(const T* logits, const int32_t* targets, LogitsShard s, float* lse, uint64_t* status,
                               double* row_losses) {
  __shared__ float scratch[kThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const T* x = logits + r * s.width;
    const float mx = row_max_of(x, s.valid, scratch);
    const float sum = row_sum_exp(x, s.valid, mx, scratch);
    if (threadIdx.x == 0) {
      const float row_lse = mx + logf(sum);
      lse[r] = row_lse;
      const int32_t t = targets[r];
      double loss = 0.0;
      if (!target_ok(t, s.vocab)) {
        record_bad_index(status, r, t);
      } else if (t >= 0) {
        loss = static_cast<double>(row_lse) - static_cast<double>(load(x, t));
      }
      row_losses[r] = loss;
    }
  }
}

// *loss = sum(row_losses) / rows with target >= 0 (0 when none), as the CPU backend's write_mean_loss.
__global__ void mean_loss_kernel(const double* row_losses, const int32_t* targets, int64_t rows, float* loss) {
  __shared__ double sum_scratch[kThreads];
  __shared__ long long count_scratch[kThreads];
  double acc = 0.0;
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    acc += row_losses[r];
    count += targets[r] >= 0 ? 1 : 0;
  }
  const double total = block_sum(acc, sum_scratch);
  const long long valid = block_sum(count, count_scratch);
  if (threadIdx.x == 0) *loss = valid > 0 ? static_cast<float>(total / static_cast<double>(valid)) : 0.0f;
}

// *scale = *dloss / rows with target >= 0, in float as the CPU backend computes it (0 when none).
__global__ void backward_scale_kernel(const int32_t* targets, int64_t rows, const float* dloss, float* scale) {
  __shared__ long long scratch[kThreads];
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) count += targets[r] >= 0 ? 1 : 0;
  const long long valid = block_sum(count, scratch);
  if (threadIdx.x == 0) *scale = valid > 0 ? dloss[0] / static_cast<float>(valid) : 0.0f;
}

template <typename TIn, typename TOut>
__global__ void backward_kernel(const TIn* logits, const int32_t* targets, const float* lse, const float* scale_ptr,
                                TOut* dlogits, LogitsShard s, uint64_t* status) {
  const float scale = *scale_ptr;
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const TIn* x = logits + r * s.width;
    TOut* dx = dlogits + r * s.width;
    const int32_t t = targets[r];
    const bool ok = target_ok(t, s.vocab);
    if (!ok && threadIdx.x == 0) record_bad_index(status, r, t);
    if (!ok || t < 0) {
      for (int64_t c = threadIdx.x; c < s.width; c += kThreads) store(dx, c, 0.0f);
      continue;
    }
    const int64_t local = static_cast<int64_t>(t) - s.first;
    const float row_lse = lse[r];
    for (int64_t c = threadIdx.x; c < s.width; c += kThreads) {
      float g = 0.0f;  // padding columns
      if (c < s.valid) {
        const float p = expf(load(x, c) - row_lse);
        g = c == local ? scale * (p - 1.0f) : scale * p;
      }
      store(dx, c, g);
    }
  }
}

template <typename T>
__global__ void shard_max_kernel(const T* logits, LogitsShard s, float* row_max) {
  __shared__ float scratch[kThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const float mx = row_max_of(logits + r * s.width, s.valid, scratch);
    if (threadIdx.x == 0) row_max[r] = mx;
  }
}

template <typename T>
__global__ void shard_sum_exp_and_target_kernel(const T* logits, const int32_t* targets, LogitsShard s,
                                                const float* row_max, float* sums, uint64_t* status) {
  __shared__ float scratch[kThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const T* x = logits + r * s.width;
    const float sum = row_sum_exp(x, s.valid, row_max[r], scratch);
    if (threadIdx.x == 0) {
      sums[r] = sum;
      const int32_t t = targets[r];
      if (!target_ok(t, s.vocab)) record_bad_index(status, r, t);
      const int64_t local = static_cast<int64_t>(t) - s.first;
      sums[s.rows + r] = (t >= 0 && target_ok(t, s.vocab) && local >= 0 && local < s.valid) ? load(x, local) : 0.0f;
    }
  }
}

__global__ void loss_rows_kernel(const float* row_max, const float* sums, const int32_t* targets, int64_t rows,
                                 float* lse, double* row_losses) {
  for (int64_t r = global_thread(); r < rows; r += grid_threads()) {
    const float row_lse = row_max[r] + logf(sums[r]);
    lse[r] = row_lse;
    row_losses[r] = targets[r] >= 0 ? static_cast<double>(row_lse) - static_cast<double>(sums[rows + r]) : 0.0;
  }
}

template <typename T>
__global__ void shard_argmax_kernel(const T* logits, LogitsShard s, const float* row_max, float* neg_index) {
  __shared__ long long scratch[kThreads];
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    const T* x = logits + r * s.width;
    const float target = row_max[r];
    long long first_hit = LLONG_MAX;
    for (int64_t c = threadIdx.x; c < s.valid; c += kThreads) {
      if (load(x, c) == target) {
        first_hit = c;
        break;  // this thread's columns ascend: the first hit is its smallest
      }
    }
    const long long hit = block_min(first_hit, scratch);
    if (threadIdx.x == 0) neg_index[r] = hit == LLONG_MAX ? -INFINITY : -static_cast<float>(s.first + hit);
  }
}

__global__ void count_correct_kernel(const float* neg_index, const int32_t* targets, int64_t rows, int64_t* counts) {
  __shared__ long long scratch[kThreads];
  long long correct = 0;
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    const int32_t t = targets[r];
    if (t < 0) continue;
    ++counted;
    correct += -neg_index[r] == static_cast<float>(t) ? 1 : 0;
  }
  const long long total_correct = block_sum(correct, scratch);
  const long long total_rows = block_sum(counted, scratch);
  if (threadIdx.x == 0) {
    counts[0] = total_correct;
    counts[1] = total_rows;
  }
}

}  // namespace

cudaError_t launch_cross_entropy_forward(const void* logits, FloatType logits_type, const int32_t* targets,
                                         const LogitsShard& shard, float* lse, float* loss, uint64_t* status,
                                         double* row_losses, cudaStream_t stream) {
  cudaError_t error = with_float_type(logits_type, [&](auto tag) {
    using T = decltype(tag);
    if (shard.rows > 0) {
      forward_kernel<T><<<row_grid(shard.rows), kThreads, 0, stream>>>(static_cast<const T*>(logits), targets, shard,
                                                                        lse, status, row_losses);
    }
    return cudaGetLastError();
  });
  if (error != cudaSuccess) return error;
  mean_loss_kernel<<<1, kThreads, 0, stream>>>(row_losses, targets, shard.rows, loss);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_backward(const void* logits, FloatType logits_type, const int32_t* targets,
                                          const float* lse, const float* dloss, void* dlogits,
                                          FloatType dlogits_type, const LogitsShard& shard, uint64_t* status,
                                          float* scale, cudaStream_t stream) {
  if (shard.rows == 0) return cudaSuccess;
  backward_scale_kernel<<<1, kThreads, 0, stream>>>(targets, shard.rows, dloss, scale);
  return with_float_type(logits_type, [&](auto in_tag) {
    using TIn = decltype(in_tag);
    return with_float_type(dlogits_type, [&](auto out_tag) {
      using TOut = decltype(out_tag);
      backward_kernel<TIn, TOut><<<row_grid(shard.rows), kThreads, 0, stream>>>(
          static_cast<const TIn*>(logits), targets, lse, scale, static_cast<TOut*>(dlogits), shard, status);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_cross_entropy_shard_max(const void* logits, FloatType logits_type, const LogitsShard& shard,
                                           float* row_max, cudaStream_t stream) {
  if (shard.rows == 0) return cudaSuccess;
  return with_float_type(logits_type, [&](auto tag) {
    using T = decltype(tag);
    shard_max_kernel<T><<<row_grid(shard.rows), kThreads, 0, stream>>>(static_cast<const T*>(logits), shard, row_max);
    return cudaGetLastError();
  });
}

cudaError_t launch_cross_entropy_shard_sum_exp_and_target(const void* logits, FloatType logits_type,
                                                          const int32_t* targets, const LogitsShard& shard,
                                                          const float* row_max, float* sums, uint64_t* status,
                                                          cudaStream_t stream) {
  if (shard.rows == 0) return cudaSuccess;
  return with_float_type(logits_type, [&](auto tag) {
    using T = decltype(tag);
    shard_sum_exp_and_target_kernel<T><<<row_grid(shard.rows), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), targets, shard, row_max, sums, status);
    return cudaGetLastError();
  });
}

cudaError_t launch_cross_entropy_loss(const float* row_max, const float* sums, const int32_t* targets, int64_t rows,
                                      float* lse, float* loss, double* row_losses, cudaStream_t stream) {
  if (rows > 0) {
    loss_rows_kernel<<<grid_for(rows), kThreads, 0, stream>>>(row_max, sums, targets, rows, lse, row_losses);
  }
  mean_loss_kernel<<<1, kThreads, 0, stream>>>(row_losses, targets, rows, loss);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_shard_argmax(const void* logits, FloatType logits_type, const LogitsShard& shard,
                                              const float* row_max, float* neg_index, cudaStream_t stream) {
  if (shard.rows == 0) return cudaSuccess;
  return with_float_type(logits_type, [&](auto tag) {
    using T = decltype(tag);
    shard_argmax_kernel<T><<<row_grid(shard.rows), kThreads, 0, stream>>>(static_cast<const T*>(logits), shard,
                                                                           row_max, neg_index);
    return cudaGetLastError();
  });
}

cudaError_t launch_count_correct(const float* neg_index, const int32_t* targets, int64_t rows, int64_t* counts,
                                 cudaStream_t stream) {
  count_correct_kernel<<<1, kThreads, 0, stream>>>(neg_index, targets, rows, counts);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
