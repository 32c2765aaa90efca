// Mixture-of-experts routing kernels (moe.hpp): grid-stride loops over output elements; the weight gradient is
// one thread per (token, j) looping over the columns in order (the CPU twin's order). Compiled, not run on a GPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void moe_gather_kernel(ConstFloats x, const std::int32_t* index, const float* scale, Floats out,
                                  int64_t rows, int64_t d) {
  const int64_t n = rows * d;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t r = i / d, c = i % d;
    const float s = scale != nullptr ? scale[r] : 1.0f;
    store(out, i, s * load(x, static_cast<int64_t>(index[r]) * d + c));
  }
}

__global__ void moe_combine_kernel(ConstFloats src, const std::int32_t* rows, const float* weight, Floats out,
                                   int64_t tokens, int64_t k, int64_t d) {
  const int64_t n = tokens * d;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t t = i / d, c = i % d;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float w = weight != nullptr ? weight[t * k + j] : 1.0f;
      acc += w * load(src, static_cast<int64_t>(rows[t * k + j]) * d + c);
    }
    store(out, i, acc);
  }
}

__global__ void moe_combine_weight_grad_kernel(ConstFloats dy, ConstFloats src, const std::int32_t* rows,
                                               float* dweight, int64_t tokens, int64_t k, int64_t d) {
  const int64_t n = tokens * k;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t t = i / k, r = rows[i];
    float acc = 0.0f;
    for (int64_t c = 0; c < d; ++c) acc += load(dy, t * d + c) * load(src, r * d + c);
    dweight[i] = acc;
  }
}

}  // namespace

cudaError_t launch_moe_gather(ConstFloats x, const std::int32_t* index, const float* scale, Floats out, int64_t rows,
                              int64_t d, cudaStream_t stream) {
  if (rows * d == 0) return cudaSuccess;
  moe_gather_kernel<<<grid_for(rows * d), kThreads, 0, stream>>>(x, index, scale, out, rows, d);
  return cudaGetLastError();
}

cudaError_t launch_moe_combine(ConstFloats src, const std::int32_t* rows, const float* weight, Floats out,
                               int64_t tokens, int64_t k, int64_t d, cudaStream_t stream) {
  if (tokens * d == 0) return cudaSuccess;
  moe_combine_kernel<<<grid_for(tokens * d), kThreads, 0, stream>>>(src, rows, weight, out, tokens, k, d);
  return cudaGetLastError();
}

cudaError_t launch_moe_combine_weight_grad(ConstFloats dy, ConstFloats src, const std::int32_t* rows, float* dweight,
                                           int64_t tokens, int64_t k, int64_t d, cudaStream_t stream) {
  if (tokens * k == 0) return cudaSuccess;
  moe_combine_weight_grad_kernel<<<grid_for(tokens * k), kThreads, 0, stream>>>(dy, src, rows, dweight, tokens, k, d);
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
