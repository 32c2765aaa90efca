// Element-wise vector helpers on the GPU, the CUDA twins of kernels/cpu/elementwise.hpp, plus f32 <-> bf16
// casts for the mixed-precision path.
//
// Invariant: every function touches exactly n elements; outputs may alias inputs element for element.
// Operands are Floats views (floats.hpp): each f32 or bf16 independently, f32 arithmetic, one rounding per store,
// so a bf16 result equals the CPU backend's (widen, f32 kernel, narrow) bit for bit.
// sum_squares reduces in an order fixed by n alone (deterministic) and accumulates in double, as on the CPU.
// All launch on `stream` and return without waiting; pointers are device pointers owned by the caller.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/floats.hpp"

namespace cleave::kernels::cuda {

void add(ConstFloats a, ConstFloats b, Floats out, int64_t n, cudaStream_t stream);  // out = a + b
void add_inplace(Floats y, ConstFloats x, int64_t n, cudaStream_t stream);           // y += x
void scale_inplace(Floats y, float alpha, int64_t n, cudaStream_t stream);           // y *= alpha
void axpy(float alpha, ConstFloats x, Floats y, int64_t n, cudaStream_t stream);     // y += alpha * x
void fill(Floats y, float value, int64_t n, cudaStream_t stream);                    // y = value (rounded once)

// *out = sum x^2 (double, written, on the device). workspace: sum_squares_workspace_size(n) bytes.
std::size_t sum_squares_workspace_size(int64_t n);
void sum_squares(const float* x, int64_t n, double* out, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream);

// Round to nearest even (as cleave::float_to_bf16), and the exact widening back.
void cast_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);

// Strided 3D copy (ops::copy_3d's shape, in elements, pointers at each side's element 0): for b < batches,
// r < rows, c < cols, dst[b·dst_batch + r·dst_row + c] = src[b·src_batch + r·src_row + c], in ONE launch.
// kNone moves elements of elem_bytes (1, 2, 4 or 8) as bits; the casts round / widen as the cast kernels above.
struct StridedCopy {
  int64_t batches = 0, rows = 0, cols = 0;
  int64_t src_batch = 0, src_row = 0, dst_batch = 0, dst_row = 0;
};
enum class CopyCast { kNone, kF32ToBf16, kBf16ToF32 };
void strided_copy(const void* src, void* dst, std::size_t elem_bytes, CopyCast cast, const StridedCopy& shape,
                  cudaStream_t stream);

namespace detail {
// Launchers (elementwise.cu) return the launch status; the functions above check it.
enum class BinaryOp { kAdd, kAxpy, kScale, kFill };
cudaError_t launch_elementwise(BinaryOp op, ConstFloats a, ConstFloats b, Floats out, float alpha, int64_t n,
                               cudaStream_t stream);
unsigned int sum_squares_blocks(int64_t n);
cudaError_t launch_sum_squares(const float* x, int64_t n, double* out, double* partials, cudaStream_t stream);
cudaError_t launch_cast_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
cudaError_t launch_cast_bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t launch_strided_copy(const void* src, void* dst, std::size_t elem_bytes, CopyCast cast,
                                const StridedCopy& shape, cudaStream_t stream);
// C = beta * C for `batch` row-major [rows, cols] matrices (leading dimension ld, batch stride `stride`), f32
// or bf16; beta == 0 writes zeros without reading C (BLAS semantics). Used by gemm when k == 0.
cudaError_t launch_scale_matrix(void* c, bool bf16, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                int64_t batch, float beta, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
