// Softmax cross-entropy on the GPU: the fused forward and backward and the vocab-parallel pieces, twins of
// kernels/cpu/cross_entropy.hpp and of the CPU backend's slots (the contract is ops.hpp's).
//
// Logits are f32 or bf16 (read widened; all arithmetic f32, the loss sum double). A row of the logits is
// `width` elements; its columns [0, valid) are the classes [first, first + valid) of `vocab`, columns
// [valid, width) are vocabulary padding: they take no part in max, sum or target and get a zero gradient.
// A target of -1 marks an ignored row (no loss, zero gradient). Any other target outside [0, vocab) is user
// error: the kernels cannot throw, so they treat the row as ignored and record (row, target) in the status
// word (index_status.hpp), which the caller reads where it synchronises anyway.
//
// Determinism: every reduction is a fixed tree over a fixed launch shape (one block of kThreads per row, one
// block for the mean), so the bits depend on the shapes alone. The loss is the MEAN over rows whose target is
// >= 0 (0 when there are none), from row losses summed in double; dlogits = dloss / valid_rows *
// (softmax - onehot) with dloss read from device memory, so no host value is needed. dlogits may alias logits.
// Every function launches on `stream` and returns without waiting, except count_correct's caller reading the
// counts. Scratch is the caller's (workspace sizes below); nothing allocates.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/float_type.hpp"

namespace cleave::kernels::cuda {

struct LogitsShard {
  int64_t rows = 0;
  int64_t width = 0;  // elements per row (>= valid)
  int64_t valid = 0;  // real classes in this shard
  int64_t first = 0;  // global class id of column 0
  int64_t vocab = 0;  // classes of the whole vocabulary (targets are global ids)
};

// Fused forward over one shard holding every class (first 0, valid == vocab <= width): lse[rows] for every
// row, *loss (f32, device) = mean loss. workspace: cross_entropy_forward_workspace_size(rows) bytes.
std::size_t cross_entropy_forward_workspace_size(int64_t rows);
void cross_entropy_forward(const void* logits, FloatType logits_type, const int32_t* targets, const LogitsShard& shard,
                           float* lse, float* loss, uint64_t* status, void* workspace, std::size_t workspace_bytes,
                           cudaStream_t stream);

// dlogits = *dloss / valid_rows * (softmax - onehot) with softmax = exp(x - lse[r]); the onehot only where the
// target lies in this shard. workspace: cross_entropy_backward_workspace_size() bytes (the scale).
std::size_t cross_entropy_backward_workspace_size();
void cross_entropy_backward(const void* logits, FloatType logits_type, const int32_t* targets, const float* lse,
                            const float* dloss, void* dlogits, FloatType dlogits_type, const LogitsShard& shard,
                            uint64_t* status, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// row_max[r] = max over the shard's valid columns (-inf when valid == 0).
void cross_entropy_shard_max(const void* logits, FloatType logits_type, const LogitsShard& shard, float* row_max,
                             cudaStream_t stream);
// sums[r] = sum over valid columns of exp(x - row_max[r]); sums[rows + r] = the target's logit when the target
// lies in this shard, else 0. Targets are checked against [-1, vocab).
void cross_entropy_shard_sum_exp_and_target(const void* logits, FloatType logits_type, const int32_t* targets,
                                            const LogitsShard& shard, const float* row_max, float* sums,
                                            uint64_t* status, cudaStream_t stream);
// lse[r] = row_max[r] + log(sums[r]); *loss = mean over rows with target >= 0 of lse - sums[rows + r].
// workspace: cross_entropy_loss_workspace_size(rows) bytes.
std::size_t cross_entropy_loss_workspace_size(int64_t rows);
void cross_entropy_loss(const float* row_max, const float* sums, const int32_t* targets, int64_t rows, float* lse,
                        float* loss, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);
// neg_index[r] = -(first + the first valid column equal to row_max[r]), -inf when none is.
void cross_entropy_shard_argmax(const void* logits, FloatType logits_type, const LogitsShard& shard,
                                const float* row_max, float* neg_index, cudaStream_t stream);
// counts[0] = rows with target >= 0 whose arg-max (-neg_index) equals the target, counts[1] = rows with
// target >= 0 (int64, device memory).
void count_correct(const float* neg_index, const int32_t* targets, int64_t rows, int64_t* counts,
                   cudaStream_t stream);

namespace detail {
// Launchers (cross_entropy.cu): the launch status; the functions above check arguments and the status.
cudaError_t launch_cross_entropy_forward(const void* logits, FloatType logits_type, const int32_t* targets,
                                         const LogitsShard& shard, float* lse, float* loss, uint64_t* status,
                                         double* row_losses, cudaStream_t stream);
cudaError_t launch_cross_entropy_backward(const void* logits, FloatType logits_type, const int32_t* targets,
                                          const float* lse, const float* dloss, void* dlogits,
                                          FloatType dlogits_type, const LogitsShard& shard, uint64_t* status,
                                          float* scale, cudaStream_t stream);
cudaError_t launch_cross_entropy_shard_max(const void* logits, FloatType logits_type, const LogitsShard& shard,
                                           float* row_max, cudaStream_t stream);
cudaError_t launch_cross_entropy_shard_sum_exp_and_target(const void* logits, FloatType logits_type,
                                                          const int32_t* targets, const LogitsShard& shard,
                                                          const float* row_max, float* sums, uint64_t* status,
                                                          cudaStream_t stream);
cudaError_t launch_cross_entropy_loss(const float* row_max, const float* sums, const int32_t* targets, int64_t rows,
                                      float* lse, float* loss, double* row_losses, cudaStream_t stream);
cudaError_t launch_cross_entropy_shard_argmax(const void* logits, FloatType logits_type, const LogitsShard& shard,
                                              const float* row_max, float* neg_index, cudaStream_t stream);
cudaError_t launch_count_correct(const float* neg_index, const int32_t* targets, int64_t rows, int64_t* counts,
                                 cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
