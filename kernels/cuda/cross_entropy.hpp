// Fused softmax + cross-entropy over [rows, classes] f32 logits on the GPU (twins of the fused kernels in
// kernels/cpu/cross_entropy.hpp); never materialises a second copy of the logits.
//
// Invariant: a target of -1 marks an ignored row (no loss, zero gradient row). A target outside [-1, classes)
// is user error: the kernels cannot throw, so they treat the row as ignored and record the smallest such row
// in `bad_row` (index_status.hpp); check_targets_status turns it into the CPU kernel's message. Forward writes
// every row's logsumexp to lse[rows] (also for ignored rows) and the SUM of the per-row losses to *loss_sum
// (double, on the device; summed in row-independent fixed order, so deterministic). Backward writes
// dlogits = scale * (softmax - onehot); dlogits may alias logits. One block per row; launch on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace cleave::kernels::cuda {

// workspace: per-row losses before the ordered sum.
std::size_t softmax_cross_entropy_forward_workspace_size(int64_t rows);
void softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse, double* loss_sum,
                                   uint32_t* bad_row, int64_t rows, int64_t classes, void* workspace,
                                   std::size_t workspace_bytes, cudaStream_t stream);

void softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, float scale,
                                    float* dlogits, uint32_t* bad_row, int64_t rows, int64_t classes,
                                    cudaStream_t stream);

// Blocks on `stream`; throws Error naming `op`, the row, the target and the class count if `bad_row` is set.
void check_targets_status(const uint32_t* bad_row, const int32_t* targets, int64_t classes, const char* op,
                          cudaStream_t stream);

namespace detail {
cudaError_t launch_softmax_cross_entropy_forward(const float* logits, const int32_t* targets, float* lse,
                                                 double* loss_sum, uint32_t* bad_row, int64_t rows, int64_t classes,
                                                 double* row_losses, cudaStream_t stream);
cudaError_t launch_softmax_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                                                  float scale, float* dlogits, uint32_t* bad_row, int64_t rows,
                                                  int64_t classes, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
