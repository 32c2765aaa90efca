// Embedding kernels (embedding.hpp). The backward is a counting sort of token positions by id followed by one
// block per touched table row:
//   count   counts[id]++ (atomics; the counts are exact whatever the order)
//   scan    offsets = exclusive prefix sum of counts (one block; integers, exact)
//   scatter positions[offsets[id] + cursor[id]++] = i  (order inside a bucket is arbitrary here)
//   rank    sorted[offsets[id] + #{j in bucket: positions[j] < i}] = i  (stable: token order restored)
//   sum     the block at each bucket's first slot adds dout rows into dtable in token order
// The rank step costs the sum of squared bucket sizes: <= n_tokens^2, reached only when every token has the
// same id (8K tokens: 67M comparisons, about a millisecond).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr int kScanThreads = 1024;
constexpr int kRowThreads = 128;

__device__ __forceinline__ bool id_ok(int32_t id, int64_t vocab) { return id >= 0 && id < vocab; }

__global__ void embedding_forward_kernel(const int32_t* ids, const float* table, float* out, uint32_t* bad_position,
                                         int64_t n_tokens, int64_t dim, int64_t vocab) {
  for (int64_t i = blockIdx.x; i < n_tokens; i += gridDim.x) {
    const int32_t id = ids[i];
    float* dst = out + i * dim;
    if (!id_ok(id, vocab)) {
      if (threadIdx.x == 0) atomicMin(bad_position, static_cast<uint32_t>(i));
      for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = 0.0f;
      continue;
    }
    const float* src = table + static_cast<int64_t>(id) * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = src[c];
  }
}

__global__ void count_kernel(const int32_t* ids, int64_t n_tokens, int64_t vocab, int32_t* counts) {
  for (int64_t i = global_thread(); i < n_tokens; i += grid_threads()) {
    const int32_t id = ids[i];
    if (id_ok(id, vocab)) atomicAdd(counts + id, 1);
  }
}

// One block of kScanThreads: each thread owns a contiguous chunk of ids.
__global__ void scan_kernel(const int32_t* counts, int64_t vocab, int32_t* offsets) {
  __shared__ int32_t totals[kScanThreads];
  const int64_t per = (vocab + kScanThreads - 1) / kScanThreads;
  const int64_t begin = threadIdx.x * per;
  const int64_t end = begin + per < vocab ? begin + per : vocab;
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
  if (threadIdx.x == kScanThreads - 1) offsets[vocab] = totals[kScanThreads - 1];
}

__global__ void scatter_kernel(const int32_t* ids, int64_t n_tokens, int64_t vocab, const int32_t* offsets,
                               int32_t* cursor, int32_t* positions) {
  for (int64_t i = global_thread(); i < n_tokens; i += grid_threads()) {
    const int32_t id = ids[i];
    if (id_ok(id, vocab)) positions[offsets[id] + atomicAdd(cursor + id, 1)] = static_cast<int32_t>(i);
  }
}

__global__ void rank_kernel(const int32_t* ids, int64_t n_tokens, int64_t vocab, const int32_t* offsets,
                            const int32_t* positions, int32_t* sorted) {
  for (int64_t i = global_thread(); i < n_tokens; i += grid_threads()) {
    const int32_t id = ids[i];
    if (!id_ok(id, vocab)) continue;
    const int32_t begin = offsets[id];
    const int32_t end = offsets[id + 1];
    int32_t rank = 0;
    for (int32_t j = begin; j < end; ++j) rank += positions[j] < i ? 1 : 0;
    sorted[begin + rank] = static_cast<int32_t>(i);
  }
}

__global__ void bucket_sum_kernel(const int32_t* ids, const float* dout, float* dtable, int64_t dim,
                                  const int32_t* offsets, const int32_t* sorted, int64_t vocab) {
  const int32_t valid = offsets[vocab];
  for (int64_t s = blockIdx.x; s < valid; s += gridDim.x) {
    const int32_t id = ids[sorted[s]];
    if (offsets[id] != s) continue;  // not the first slot of its bucket
    const int32_t end = offsets[id + 1];
    float* dst = dtable + static_cast<int64_t>(id) * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float acc = dst[c];
      for (int32_t k = static_cast<int32_t>(s); k < end; ++k) acc += dout[static_cast<int64_t>(sorted[k]) * dim + c];
      dst[c] = acc;
    }
  }
}

__global__ void position_forward_kernel(float* x, const float* pos, int64_t B, int64_t T, int64_t D) {
  const int64_t n = B * T * D;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) x[i] += pos[i % (T * D)];
}

__global__ void position_backward_kernel(const float* dx, float* dpos, int64_t B, int64_t T, int64_t D) {
  const int64_t n = T * D;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    float acc = dpos[i];
    for (int64_t b = 0; b < B; ++b) acc += dx[b * n + i];
    dpos[i] = acc;
  }
}

unsigned int token_grid(int64_t n_tokens) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 16;
  return static_cast<unsigned int>(n_tokens < 1 ? 1 : (n_tokens > kMaxBlocks ? kMaxBlocks : n_tokens));
}

}  // namespace

cudaError_t launch_embedding_forward(const int32_t* ids, const float* table, float* out, uint32_t* bad_position,
                                     int64_t n_tokens, int64_t dim, int64_t vocab, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  embedding_forward_kernel<<<token_grid(n_tokens), kRowThreads, 0, stream>>>(ids, table, out, bad_position, n_tokens,
                                                                             dim, vocab);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens,
                                      int64_t dim, int64_t vocab, int32_t* workspace, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  int32_t* counts = workspace;
  int32_t* cursor = counts + vocab;
  int32_t* offsets = cursor + vocab;
  int32_t* positions = offsets + vocab + 1;
  int32_t* sorted = positions + n_tokens;
  cudaError_t status = cudaMemsetAsync(counts, 0, 2 * static_cast<size_t>(vocab) * sizeof(int32_t), stream);
  if (status != cudaSuccess) return status;
  count_kernel<<<grid_for(n_tokens), kThreads, 0, stream>>>(ids, n_tokens, vocab, counts);
  scan_kernel<<<1, kScanThreads, 0, stream>>>(counts, vocab, offsets);
  scatter_kernel<<<grid_for(n_tokens), kThreads, 0, stream>>>(ids, n_tokens, vocab, offsets, cursor, positions);
  rank_kernel<<<grid_for(n_tokens), kThreads, 0, stream>>>(ids, n_tokens, vocab, offsets, positions, sorted);
  bucket_sum_kernel<<<token_grid(n_tokens), kRowThreads, 0, stream>>>(ids, dout, dtable, dim, offsets, sorted, vocab);
  return cudaGetLastError();
}

cudaError_t launch_position_embedding_forward(float* x, const float* pos, int64_t B, int64_t T, int64_t D,
                                              cudaStream_t stream) {
  if (B * T * D == 0) return cudaSuccess;
  position_forward_kernel<<<grid_for(B * T * D), kThreads, 0, stream>>>(x, pos, B, T, D);
  return cudaGetLastError();
}

cudaError_t launch_position_embedding_backward(const float* dx, float* dpos, int64_t B, int64_t T, int64_t D,
                                               cudaStream_t stream) {
  if (T * D == 0) return cudaSuccess;
  position_backward_kernel<<<grid_for(T * D), kThreads, 0, stream>>>(dx, dpos, B, T, D);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
