// Checked entry points for the softmax cross-entropy kernels (cross_entropy.hpp); kernels in cross_entropy.cu.
#include "kernels/cuda/cross_entropy.hpp"

#include <limits>

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {
namespace {

void check_shard(const char* op, const LogitsShard& s) {
  CLEAVE_ASSERT(s.rows >= 0 && s.width > 0 && s.valid >= 0 && s.valid <= s.width && s.first >= 0 &&
                    s.first + s.valid <= s.vocab,
                "cuda {}: bad logits shard rows={} width={} classes [{}, {}) of {}", op, s.rows, s.width, s.first,
                s.first + s.valid, s.vocab);
  CLEAVE_ASSERT(s.rows < std::numeric_limits<uint32_t>::max() && s.vocab <= std::numeric_limits<int32_t>::max(),
                "cuda {}: {} rows or {} classes exceed 32 bits", op, s.rows, s.vocab);
}

void check_workspace(const char* op, void* workspace, std::size_t bytes, std::size_t needed) {
  CLEAVE_ASSERT(bytes >= needed && (needed == 0 || workspace != nullptr),
                "cuda {}: workspace of {} bytes, {} needed", op, bytes, needed);
}

}  // namespace

std::size_t cross_entropy_forward_workspace_size(int64_t rows) {
  return static_cast<std::size_t>(rows > 0 ? rows : 1) * sizeof(double);
}

void cross_entropy_forward(const void* logits, FloatType logits_type, const int32_t* targets, const LogitsShard& shard,
                           float* lse, float* loss, uint64_t* status, void* workspace, std::size_t workspace_bytes,
                           cudaStream_t stream) {
  check_shard("cross_entropy_forward", shard);
  CLEAVE_ASSERT(shard.first == 0 && shard.valid == shard.vocab,
                "cuda cross_entropy_forward: the fused forward takes every class (got [{}, {}) of {})", shard.first,
                shard.first + shard.valid, shard.vocab);
  check_workspace("cross_entropy_forward", workspace, workspace_bytes,
                  cross_entropy_forward_workspace_size(shard.rows));
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_cross_entropy_forward(logits, logits_type, targets, shard, lse, loss, status,
                                                                static_cast<double*>(workspace), stream),
                           "cross-entropy forward_kernel/mean_loss_kernel");
}

std::size_t cross_entropy_backward_workspace_size() { return sizeof(float); }

void cross_entropy_backward(const void* logits, FloatType logits_type, const int32_t* targets, const float* lse,
                            const float* dloss, void* dlogits, FloatType dlogits_type, const LogitsShard& shard,
                            uint64_t* status, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  check_shard("cross_entropy_backward", shard);
  check_workspace("cross_entropy_backward", workspace, workspace_bytes, cross_entropy_backward_workspace_size());
  CLEAVE_CUDA_CHECK_LAUNCH(
      detail::launch_cross_entropy_backward(logits, logits_type, targets, lse, dloss, dlogits, dlogits_type, shard,
                                            status, static_cast<float*>(workspace), stream),
      "cross-entropy backward_scale_kernel/backward_kernel");
}

void cross_entropy_shard_max(const void* logits, FloatType logits_type, const LogitsShard& shard, float* row_max,
                             cudaStream_t stream) {
  check_shard("cross_entropy_shard_max", shard);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_cross_entropy_shard_max(logits, logits_type, shard, row_max, stream),
                           "cross-entropy shard_max_kernel");
}

void cross_entropy_shard_sum_exp_and_target(const void* logits, FloatType logits_type, const int32_t* targets,
                                            const LogitsShard& shard, const float* row_max, float* sums,
                                            uint64_t* status, cudaStream_t stream) {
  check_shard("cross_entropy_shard_sum_exp_and_target", shard);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_cross_entropy_shard_sum_exp_and_target(logits, logits_type, targets, shard,
                                                                                 row_max, sums, status, stream),
                           "cross-entropy shard_sum_exp_and_target_kernel");
}

std::size_t cross_entropy_loss_workspace_size(int64_t rows) { return cross_entropy_forward_workspace_size(rows); }

void cross_entropy_loss(const float* row_max, const float* sums, const int32_t* targets, int64_t rows, float* lse,
                        float* loss, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0, "cuda cross_entropy_loss: negative rows {}", rows);
  check_workspace("cross_entropy_loss", workspace, workspace_bytes, cross_entropy_loss_workspace_size(rows));
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_cross_entropy_loss(row_max, sums, targets, rows, lse, loss,
                                                             static_cast<double*>(workspace), stream),
                           "cross-entropy loss_rows_kernel/mean_loss_kernel");
}

void cross_entropy_shard_argmax(const void* logits, FloatType logits_type, const LogitsShard& shard,
                                const float* row_max, float* neg_index, cudaStream_t stream) {
  check_shard("cross_entropy_shard_argmax", shard);
  CLEAVE_CUDA_CHECK_LAUNCH(
      detail::launch_cross_entropy_shard_argmax(logits, logits_type, shard, row_max, neg_index, stream),
      "cross-entropy shard_argmax_kernel");
}

void count_correct(const float* neg_index, const int32_t* targets, int64_t rows, int64_t* counts,
                   cudaStream_t stream) {
  CLEAVE_ASSERT(rows >= 0, "cuda count_correct: negative rows {}", rows);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_count_correct(neg_index, targets, rows, counts, stream),
                           "count_correct_kernel");
}

}  // namespace cleave::kernels::cuda
