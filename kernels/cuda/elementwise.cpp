// Checked entry points for the element-wise kernels (elementwise.hpp); the kernels are in elementwise.cu.
#include "kernels/cuda/elementwise.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void add(ConstFloats a, ConstFloats b, Floats out, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda add: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_elementwise(detail::BinaryOp::kAdd, a, b, out, 1.0f, n, stream),
                           "elementwise_kernel(add)");
}

void add_inplace(Floats y, ConstFloats x, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda add_inplace: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_elementwise(detail::BinaryOp::kAdd, y, x, y, 1.0f, n, stream),
                           "elementwise_kernel(add_inplace)");
}

void scale_inplace(Floats y, float alpha, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda scale_inplace: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_elementwise(detail::BinaryOp::kScale, y, nullptr, y, alpha, n, stream),
                           "elementwise_kernel(scale_inplace)");
}

void axpy(float alpha, ConstFloats x, Floats y, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda axpy: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_elementwise(detail::BinaryOp::kAxpy, x, y, y, alpha, n, stream),
                           "elementwise_kernel(axpy)");
}

void fill(Floats y, float value, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda fill: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_elementwise(detail::BinaryOp::kFill, nullptr, nullptr, y, value, n, stream),
                           "elementwise_kernel(fill)");
}

std::size_t sum_squares_workspace_size(int64_t n) { return detail::sum_squares_blocks(n) * sizeof(double); }

void sum_squares(const float* x, int64_t n, double* out, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda sum_squares: negative size {}", n);
  CLEAVE_ASSERT(workspace_bytes >= sum_squares_workspace_size(n) && workspace != nullptr,
                "cuda sum_squares: workspace of {} bytes, {} needed for {} elements", workspace_bytes,
                sum_squares_workspace_size(n), n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_sum_squares(x, n, out, static_cast<double*>(workspace), stream),
                           "sum_squares_partial_kernel/sum_squares_final_kernel");
}

void cast_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda cast_f32_to_bf16: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_cast_f32_to_bf16(x, y, n, stream), "cast_f32_to_bf16_kernel");
}

void cast_bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream) {
  CLEAVE_ASSERT(n >= 0, "cuda cast_bf16_to_f32: negative size {}", n);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_cast_bf16_to_f32(x, y, n, stream), "cast_bf16_to_f32_kernel");
}

void strided_copy(const void* src, void* dst, std::size_t elem_bytes, CopyCast cast, const StridedCopy& shape,
                  cudaStream_t stream) {
  CLEAVE_ASSERT(shape.batches >= 0 && shape.rows >= 0 && shape.cols >= 0, "cuda strided_copy: negative shape {} {} {}",
                shape.batches, shape.rows, shape.cols);
  CLEAVE_ASSERT(cast != CopyCast::kNone || elem_bytes == 1 || elem_bytes == 2 || elem_bytes == 4 || elem_bytes == 8,
                "cuda strided_copy: elements of {} bytes", elem_bytes);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_strided_copy(src, dst, elem_bytes, cast, shape, stream),
                           "strided_copy_kernel");
}

}  // namespace cleave::kernels::cuda
