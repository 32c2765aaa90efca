// Element-wise kernels, the sum-of-squares reduction, casts and the strided copy (elementwise.hpp). Grid-stride
// loops over int64 indices; the reduction is two fixed-shape passes (per-block partials, then one block), so its
// bits depend on n only.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

__global__ void elementwise_kernel(BinaryOp op, ConstFloats a, ConstFloats b, Floats out, float alpha, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    switch (op) {
      case BinaryOp::kAdd:
        store(out, i, load(a, i) + load(b, i));
        break;
      case BinaryOp::kAxpy:
        store(out, i, load(b, i) + alpha * load(a, i));
        break;
      case BinaryOp::kScale:
        store(out, i, load(a, i) * alpha);
        break;
      case BinaryOp::kFill:
        store(out, i, alpha);
        break;
    }
  }
}

__global__ void sum_squares_partial_kernel(const float* x, int64_t n, double* partials) {
  __shared__ double scratch[kThreads];
  double acc = 0.0;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const double v = x[i];
    acc += v * v;
  }
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_squares_final_kernel(const double* partials, unsigned int count, double* out) {
  __shared__ double scratch[kThreads];
  double acc = 0.0;
  for (unsigned int i = threadIdx.x; i < count; i += kThreads) acc += partials[i];
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = total;
}

__global__ void cast_f32_to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void cast_bf16_to_f32_kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = __bfloat162float(x[i]);
}

// One element of a strided copy: the bits in one type, or the cast kernels' rounding / widening.
template <typename T>
__device__ __forceinline__ void put(T* y, T x) {
  *y = x;
}
__device__ __forceinline__ void put(__nv_bfloat16* y, float x) { *y = __float2bfloat16_rn(x); }
__device__ __forceinline__ void put(float* y, __nv_bfloat16 x) { *y = __bfloat162float(x); }

// Element i of batches x rows x cols, in row-major order of the three (consecutive threads: consecutive columns).
template <typename From, typename To>
__global__ void strided_copy_kernel(const From* x, To* y, StridedCopy s) {
  const int64_t per_batch = s.rows * s.cols;
  const int64_t n = per_batch * s.batches;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t b = i / per_batch, r = (i % per_batch) / s.cols, c = i % s.cols;
    put(y + b * s.dst_batch + r * s.dst_row + c, x[b * s.src_batch + r * s.src_row + c]);
  }
}

template <typename From, typename To>
cudaError_t strided_copy_as(const void* x, void* y, const StridedCopy& s, cudaStream_t stream) {
  strided_copy_kernel<<<grid_for(s.batches * s.rows * s.cols), kThreads, 0, stream>>>(static_cast<const From*>(x),
                                                                                      static_cast<To*>(y), s);
  return cudaGetLastError();
}

template <typename T>
__device__ __forceinline__ T scaled(T v, float beta);
template <>
__device__ __forceinline__ float scaled(float v, float beta) {
  return v * beta;
}
template <>
__device__ __forceinline__ __nv_bfloat16 scaled(__nv_bfloat16 v, float beta) {
  return __float2bfloat16_rn(__bfloat162float(v) * beta);
}

template <typename T>
__global__ void scale_matrix_kernel(T* c, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch,
                                    float beta) {
  const int64_t per_matrix = rows * cols;
  for (int64_t i = global_thread(); i < per_matrix * batch; i += grid_threads()) {
    const int64_t b = i / per_matrix;
    const int64_t r = (i % per_matrix) / cols;
    const int64_t col = i % cols;
    T* p = c + b * stride + r * ld + col;
    *p = beta == 0.0f ? T(0.0f) : scaled(*p, beta);
  }
}

}  // namespace

cudaError_t launch_elementwise(BinaryOp op, ConstFloats a, ConstFloats b, Floats out, float alpha, int64_t n,
                               cudaStream_t stream) {
  return launch_grid_stride(elementwise_kernel, n, stream, op, a, b, out, alpha, n);
}

unsigned int sum_squares_blocks(int64_t n) {
  return static_cast<unsigned int>(launch::sum_squares_partial(n).grid.x);
}

cudaError_t launch_sum_squares(const float* x, int64_t n, double* out, double* partials, cudaStream_t stream) {
  const unsigned int blocks = sum_squares_blocks(n);
  sum_squares_partial_kernel<<<blocks, kThreads, 0, stream>>>(x, n, partials);
  sum_squares_final_kernel<<<1, kThreads, 0, stream>>>(partials, blocks, out);
  return cudaGetLastError();
}

cudaError_t launch_cast_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  return launch_grid_stride(cast_f32_to_bf16_kernel, n, stream, x, y, n);
}

cudaError_t launch_cast_bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream) {
  return launch_grid_stride(cast_bf16_to_f32_kernel, n, stream, x, y, n);
}

cudaError_t launch_strided_copy(const void* src, void* dst, std::size_t elem_bytes, CopyCast cast,
                                const StridedCopy& shape, cudaStream_t stream) {
  if (shape.batches * shape.rows * shape.cols == 0) return cudaSuccess;
  switch (cast) {
    case CopyCast::kF32ToBf16:
      return strided_copy_as<float, __nv_bfloat16>(src, dst, shape, stream);
    case CopyCast::kBf16ToF32:
      return strided_copy_as<__nv_bfloat16, float>(src, dst, shape, stream);
    case CopyCast::kNone:
      break;
  }
  switch (elem_bytes) {
    case 1:
      return strided_copy_as<uint8_t, uint8_t>(src, dst, shape, stream);
    case 2:
      return strided_copy_as<uint16_t, uint16_t>(src, dst, shape, stream);
    case 4:
      return strided_copy_as<uint32_t, uint32_t>(src, dst, shape, stream);
    case 8:
      return strided_copy_as<uint64_t, uint64_t>(src, dst, shape, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_scale_matrix(void* c, bool bf16, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                int64_t batch, float beta, cudaStream_t stream) {
  const int64_t total = rows * cols * batch;
  if (total == 0) return cudaSuccess;
  if (bf16) {
    scale_matrix_kernel<<<grid_for(total), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(c), rows, cols, ld,
                                                                  stride, batch, beta);
  } else {
    scale_matrix_kernel<<<grid_for(total), kThreads, 0, stream>>>(static_cast<float*>(c), rows, cols, ld, stride, batch,
                                                                  beta);
  }
  return cudaGetLastError();
}

}  // namespace cleave::kernels::cuda::detail
