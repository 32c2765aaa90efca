// Sum of squares over several f32 tensors with one result (the gradient norm), on the GPU.
//
// Invariant: each tensor's sum is exactly what sum_squares (elementwise.hpp) computes for it alone (the same
// two fixed-shape passes), written to sums[i]; *out = ((0 + sums[0]) + sums[1]) + ..., added in the order
// given by one thread, as the CPU adds its per-tensor sums. So the result is deterministic and needs one
// read-back for any number of tensors (the caller's). Launches 2 kernels per tensor and 1 for the total, on
// `stream`, no host wait. A fused multi-tensor kernel (one launch) is later work.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace cleave::kernels::cuda {

// workspace: sum_squares_many_workspace_size(sizes, count) bytes (the per-tensor sums and the block partials).
std::size_t sum_squares_many_workspace_size(const int64_t* sizes, int count);
// xs[i] are device pointers to sizes[i] floats (host arrays of `count` entries); *out (device) = the total.
void sum_squares_many(const float* const* xs, const int64_t* sizes, int count, double* out, void* workspace,
                      std::size_t workspace_bytes, cudaStream_t stream);

namespace detail {
cudaError_t launch_sum_in_order(const double* values, int count, double* out, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
