// Embedding kernels (embedding.hpp). The backward is a counting sort of token positions by local id (the id
// minus the shard's first row; ids outside the shard are skipped) followed by one block per touched table row:
//   count   counts[local]++ (atomics; the counts are exact whatever the order)
//   scan    offsets = exclusive prefix sum of counts (one block; integers, exact)
//   scatter positions[offsets[local] + cursor[local]++] = i  (order inside a bucket is arbitrary here)
//   rank    sorted[offsets[local] + #{j in bucket: positions[j] < i}] = i  (stable: token order restored)
//   sum     the block at each bucket's first slot adds dout rows into dtable in token order
// The rank step costs the sum of squared bucket sizes: <= n_tokens^2, reached only when every token has the
// same id (8K tokens: 67M comparisons, about a millisecond).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/float_io.cuh"
#include "kernels/cuda/index_status.cuh"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr int kScanThreads = launch::kScanThreads;
constexpr int kRowThreads = launch::kEmbeddingRowThreads;

// The table row of `id` in this shard, or -1 when the shard does not hold it.
__device__ __forceinline__ int64_t local_row(int32_t id, const EmbeddingRange& range) {
  const int64_t local = static_cast<int64_t>(id) - range.first;
  return local >= 0 && local < range.valid ? local : -1;
}

template <typename TT, typename TO>
__global__ void embedding_forward_kernel(const int32_t* ids, const TT* table, TO* out, uint64_t* status,
                                         int64_t n_tokens, int64_t dim, EmbeddingRange range) {
  for (int64_t i = blockIdx.x; i < n_tokens; i += gridDim.x) {
    const int32_t id = ids[i];
    TO* dst = out + i * dim;
    if ((id < 0 || id >= range.vocab) && threadIdx.x == 0) record_bad_index(status, i, id);
    const int64_t local = local_row(id, range);
    if (local < 0) {
      for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) store(dst, c, 0.0f);
      continue;
    }
    const TT* src = table + local * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) store(dst, c, load(src, c));
  }
}

__global__ void count_kernel(const int32_t* ids, int64_t n_tokens, EmbeddingRange range, int32_t* counts) {
  for (int64_t i = global_thread(); i < n_tokens; i += grid_threads()) {
    const int64_t local = local_row(ids[i], range);
    if (local >= 0) atomicAdd(counts + local, 1);
  }
}

// One block of kScanThreads: each thread owns a contiguous chunk of ids.
__global__ void scan_kernel(const int32_t* counts, int64_t buckets, int32_t* offsets) {
  __shared__ int32_t totals[kScanThreads];
  const int64_t per = (buckets + kScanThreads - 1) / kScanThreads;
  const int64_t begin = threadIdx.x * per;
  const int64_t end = begin + per < buckets ? begin + per : buckets;
  int32_t local = 0;
  for (int64_t v = begin; v < end; ++v) local += counts[v];
  totals[threadIdx.x] = local;
  __syncthreads();
  for (int stride = 1; stride < kScanThreads; stride *= 2) {  // inclusive Hillis-Steele scan
    const int32_t add = threadIdx.x >= static_cast<unsigned int>(stride) ? totals[threadIdx.x - stride] : 0;
    __syncthreads();
    totals[threadIdx.x] += add;
    __syncthreads();
  }
  int32_t running = totals[threadIdx.x] - local;
  for (int64_t v = begin; v < end; ++v) {
    offsets[v] = running;
    running += counts[v];
  }
  if (threadIdx.x == kScanThreads - 1) offsets[buckets] = totals[kScanThreads - 1];
}

__global__ void scatter_kernel(const int32_t* ids, int64_t n_tokens, EmbeddingRange range, const int32_t* offsets,
                               int32_t* cursor, int32_t* positions) {
  for (int64_t i = global_thread(); i < n_tokens; i += grid_threads()) {
    const int64_t local = local_row(ids[i], range);
    if (local >= 0) positions[offsets[local] + atomicAdd(cursor + local, 1)] = static_cast<int32_t>(i);
  }
}

__global__ void rank_kernel(const int32_t* ids, int64_t n_tokens, EmbeddingRange range, const int32_t* offsets,
                            const int32_t* positions, int32_t* sorted) {
  for (int64_t i = global_thread(); i < n_tokens; i += grid_threads()) {
    const int64_t local = local_row(ids[i], range);
    if (local < 0) continue;
    const int32_t begin = offsets[local];
    const int32_t end = offsets[local + 1];
    int32_t rank = 0;
    for (int32_t j = begin; j < end; ++j) rank += positions[j] < i ? 1 : 0;
    sorted[begin + rank] = static_cast<int32_t>(i);
  }
}

template <typename T>
__global__ void bucket_sum_kernel(const int32_t* ids, const T* dout, float* dtable, int64_t dim,
                                  const int32_t* offsets, const int32_t* sorted, EmbeddingRange range) {
  const int32_t total = offsets[range.valid];
  for (int64_t s = blockIdx.x; s < total; s += gridDim.x) {
    const int64_t local = local_row(ids[sorted[s]], range);
    if (offsets[local] != s) continue;  // not the first slot of its bucket
    const int32_t end = offsets[local + 1];
    float* dst = dtable + local * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float acc = dst[c];
      for (int32_t k = static_cast<int32_t>(s); k < end; ++k) {
        acc += load(dout, static_cast<int64_t>(sorted[k]) * dim + c);
      }
      dst[c] = acc;
    }
  }
}

template <typename TX, typename TP>
__global__ void position_forward_kernel(TX* x, const TP* pos, int64_t B, int64_t T, int64_t D) {
  const int64_t n = B * T * D;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) store(x, i, load(x, i) + load(pos, i % (T * D)));
}

template <typename TX>
__global__ void position_backward_kernel(const TX* dx, float* dpos, int64_t B, int64_t T, int64_t D) {
  const int64_t n = T * D;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    float acc = dpos[i];
    for (int64_t b = 0; b < B; ++b) acc += load(dx, b * n + i);
    dpos[i] = acc;
  }
}

unsigned int token_grid(int64_t n_tokens) {
  return static_cast<unsigned int>(launch::block_per_row(n_tokens, kRowThreads).grid.x);
}

}  // namespace

cudaError_t launch_embedding_forward(const int32_t* ids, const void* table, FloatType table_type, void* out,
                                     FloatType out_type, uint64_t* status, int64_t n_tokens, int64_t dim,
                                     const EmbeddingRange& range, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  return with_float_type(table_type, [&](auto table_tag) {
    using TT = decltype(table_tag);
    return with_float_type(out_type, [&](auto out_tag) {
      using TO = decltype(out_tag);
      embedding_forward_kernel<TT, TO><<<token_grid(n_tokens), kRowThreads, 0, stream>>>(
          ids, static_cast<const TT*>(table), static_cast<TO*>(out), status, n_tokens, dim, range);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_embedding_backward(const int32_t* ids, const void* dout, FloatType dout_type, float* dtable,
                                      int64_t n_tokens, int64_t dim, const EmbeddingRange& range, int32_t* workspace,
                                      cudaStream_t stream) {
  if (n_tokens == 0 || range.valid == 0) return cudaSuccess;
  const int64_t buckets = range.valid;
  int32_t* counts = workspace;
  int32_t* cursor = counts + buckets;
  int32_t* offsets = cursor + buckets;
  int32_t* positions = offsets + buckets + 1;
  int32_t* sorted = positions + n_tokens;
  cudaError_t status = cudaMemsetAsync(counts, 0, 2 * static_cast<size_t>(buckets) * sizeof(int32_t), stream);
  if (status != cudaSuccess) return status;
  count_kernel<<<grid_for(n_tokens), kThreads, 0, stream>>>(ids, n_tokens, range, counts);
  scan_kernel<<<1, kScanThreads, 0, stream>>>(counts, buckets, offsets);
  scatter_kernel<<<grid_for(n_tokens), kThreads, 0, stream>>>(ids, n_tokens, range, offsets, cursor, positions);
  rank_kernel<<<grid_for(n_tokens), kThreads, 0, stream>>>(ids, n_tokens, range, offsets, positions, sorted);
  return with_float_type(dout_type, [&](auto tag) {
    using T = decltype(tag);
    bucket_sum_kernel<T><<<token_grid(n_tokens), kRowThreads, 0, stream>>>(ids, static_cast<const T*>(dout), dtable,
                                                                           dim, offsets, sorted, range);
    return cudaGetLastError();
  });
}

cudaError_t launch_position_embedding_forward(void* x, FloatType x_type, const void* pos, FloatType pos_type,
                                              int64_t B, int64_t T, int64_t D, cudaStream_t stream) {
  if (B * T * D == 0) return cudaSuccess;
  return with_float_type(x_type, [&](auto x_tag) {
    using TX = decltype(x_tag);
    return with_float_type(pos_type, [&](auto pos_tag) {
      using TP = decltype(pos_tag);
      position_forward_kernel<TX, TP><<<grid_for(B * T * D), kThreads, 0, stream>>>(
          static_cast<TX*>(x), static_cast<const TP*>(pos), B, T, D);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_position_embedding_backward(const void* dx, FloatType dx_type, float* dpos, int64_t B, int64_t T,
                                               int64_t D, cudaStream_t stream) {
  if (T * D == 0) return cudaSuccess;
  return with_float_type(dx_type, [&](auto tag) {
    using TX = decltype(tag);
    position_backward_kernel<TX><<<grid_for(T * D), kThreads, 0, stream>>>(static_cast<const TX*>(dx), dpos, B, T, D);
    return cudaGetLastError();
  });
}

}  // namespace cleave::kernels::cuda::detail
