// Checked entry points for the memory-efficient attention kernels (flash_attention.hpp); kernels in
// flash_attention.cu.
#include "kernels/cuda/flash_attention.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/launch_config.hpp"

namespace cleave::kernels::cuda {
namespace {

void check_shape(const char* op, const FlashAttentionShape& s) {
  CLEAVE_ASSERT(s.batch >= 0 && s.q_len >= 0 && s.kv_len >= 0 && s.q_heads > 0 && s.kv_heads > 0 &&
                    s.q_heads % s.kv_heads == 0 && s.head_dim > 0,
                "cuda {}: bad shape batch {} q_len {} kv_len {} heads {}/{} head_dim {}", op, s.batch, s.q_len,
                s.kv_len, s.q_heads, s.kv_heads, s.head_dim);
  CLEAVE_CHECK(flash_attention_can_implement(s),
               "cuda {}: head dimension {} is above the kernels' {} (use a smaller head or the cpu)", op, s.head_dim,
               kFlashMaxHeadDim);
  CLEAVE_CHECK(launch::flash_grid_fits(s.q_len, launch::kFlashRowsPerBlock, s.q_heads, s.batch) &&
                   launch::flash_grid_fits(s.kv_len, launch::kFlashKeysPerBlock, s.kv_heads, s.batch),
               "cuda {}: batch {} and heads {} / {} must each be at most {} (the kernels' grid y and z: split the "
               "batch), and {} queries / {} keys at most {} / {} (grid x)",
               op, s.batch, s.q_heads, s.kv_heads, launch::kMaxGridYZ, s.q_len, s.kv_len,
               launch::kFlashRowsPerBlock * ((int64_t{1} << 31) - 1),
               launch::kFlashKeysPerBlock * ((int64_t{1} << 31) - 1));
}

}  // namespace

bool flash_attention_can_implement(const FlashAttentionShape& shape) {
  return shape.head_dim > 0 && shape.head_dim <= kFlashMaxHeadDim;
}

std::size_t flash_attention_backward_workspace_size(const FlashAttentionShape& s) {
  return static_cast<std::size_t>(s.batch * s.q_heads * s.q_len) * sizeof(float);
}

void flash_attention_forward(FloatType type, const void* q, const void* k, const void* v, void* out, float* lse,
                             const FlashAttentionShape& shape, cudaStream_t stream) {
  check_shape("flash_attention_forward", shape);
  if (shape.batch == 0 || shape.q_len == 0) return;
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_flash_forward(type, q, k, v, out, lse, shape, stream),
                           "flash_forward_kernel");
}

void flash_attention_backward(FloatType type, const void* q, const void* k, const void* v, const void* out,
                              const float* lse, const void* dout, void* dq, void* dk, void* dv,
                              const FlashAttentionShape& shape, bool accumulate, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream) {
  check_shape("flash_attention_backward", shape);
  const std::size_t needed = flash_attention_backward_workspace_size(shape);
  CLEAVE_ASSERT(workspace_bytes >= needed && (needed == 0 || workspace != nullptr),
                "cuda flash_attention_backward: workspace of {} bytes, {} needed", workspace_bytes, needed);
  if (shape.batch == 0 || (shape.q_len == 0 && shape.kv_len == 0)) return;
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_flash_backward(type, q, k, v, out, lse, dout, dq, dk, dv, shape, accumulate,
                                                         static_cast<float*>(workspace), stream),
                           "flash_backward_dot_kernel/flash_backward_dq_kernel/flash_backward_dkdv_kernel");
}

void attention_merge(FloatType type, const void* out_a, const float* lse_a, const void* out_b, const float* lse_b,
                     void* out, float* lse, int64_t batch, int64_t len, int64_t heads, int64_t head_dim,
                     cudaStream_t stream) {
  CLEAVE_ASSERT(batch >= 0 && len >= 0 && heads > 0 && head_dim > 0, "cuda attention_merge: bad shape {} {} {} {}",
                batch, len, heads, head_dim);
  if (batch * len == 0) return;
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_attention_merge(type, out_a, lse_a, out_b, lse_b, out, lse, batch, len,
                                                          heads, head_dim, stream),
                           "attention_merge_kernel");
}

}  // namespace cleave::kernels::cuda
