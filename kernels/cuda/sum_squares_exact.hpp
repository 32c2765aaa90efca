// Exact sum of squares of one f32 tensor on the GPU, added into a device ExactSquareSum (the gradient norm).
//
// Invariant: *acc gains exactly Σ x² (kernels/exact_square_sum.hpp): every thread adds its squares into its
// own fixed-point digits, the block adds its threads' normalized digits with integer atomics, and the grid
// adds each block's normalized digits into *acc with integer atomics. Integer addition is associative, so the
// result is the same digits for any launch geometry, scheduling or split of the tensors, and equals the CPU
// backend's. On `stream`, no host wait; *acc (device) must start zeroed and stays within the headroom for any
// number of tensors below 2^20 whole-grid launches.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/exact_square_sum.hpp"

namespace cleave::kernels::cuda {

// acc += Σ x[i]² for n floats at device pointer x; acc is a device pointer.
void sum_squares_exact(const float* x, int64_t n, ExactSquareSum* acc, cudaStream_t stream);

namespace detail {
cudaError_t launch_sum_squares_exact(const float* x, int64_t n, ExactSquareSum* acc, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
