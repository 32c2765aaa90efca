// Checked entry points for the embedding kernels (embedding.hpp); the kernels are in embedding.cu.
#include "kernels/cuda/embedding.hpp"

#include <limits>

#include "engine/cuda/cuda_check.hpp"
#include "kernels/cuda/index_status.hpp"

namespace cleave::kernels::cuda {

void embedding_forward(const int32_t* ids, const float* table, float* out, uint32_t* bad_position, int64_t n_tokens,
                       int64_t dim, int64_t vocab, cudaStream_t stream) {
  CLEAVE_ASSERT(n_tokens >= 0 && dim > 0 && vocab > 0, "cuda embedding_forward: bad shape n_tokens={} dim={} vocab={}",
                n_tokens, dim, vocab);
  CLEAVE_ASSERT(n_tokens < std::numeric_limits<uint32_t>::max(), "cuda embedding_forward: {} tokens exceed 32 bits",
                n_tokens);
  CLEAVE_CUDA_CHECK_LAUNCH(
      detail::launch_embedding_forward(ids, table, out, bad_position, n_tokens, dim, vocab, stream),
      "embedding_forward_kernel");
}

std::size_t embedding_backward_workspace_size(int64_t n_tokens, int64_t vocab) {
  return static_cast<std::size_t>(3 * vocab + 1 + 2 * n_tokens) * sizeof(int32_t);
}

void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens, int64_t dim,
                        int64_t vocab, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  CLEAVE_ASSERT(n_tokens >= 0 && dim > 0 && vocab > 0, "cuda embedding_backward: bad shape n_tokens={} dim={} vocab={}",
                n_tokens, dim, vocab);
  CLEAVE_ASSERT(n_tokens < std::numeric_limits<int32_t>::max() && vocab < std::numeric_limits<int32_t>::max(),
                "cuda embedding_backward: {} tokens or vocabulary {} exceed 31 bits", n_tokens, vocab);
  const std::size_t needed = embedding_backward_workspace_size(n_tokens, vocab);
  CLEAVE_ASSERT(workspace_bytes >= needed && workspace != nullptr,
                "cuda embedding_backward: workspace of {} bytes, {} needed for {} tokens and vocabulary {}",
                workspace_bytes, needed, n_tokens, vocab);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_embedding_backward(ids, dout, dtable, n_tokens, dim, vocab,
                                                             static_cast<int32_t*>(workspace), stream),
                           "embedding backward (count/scan/scatter/rank/bucket_sum kernels)");
}

void position_embedding_forward(float* x, const float* pos, int64_t B, int64_t T, int64_t D, cudaStream_t stream) {
  CLEAVE_ASSERT(B >= 0 && T >= 0 && D > 0, "cuda position_embedding_forward: bad shape B={} T={} D={}", B, T, D);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_position_embedding_forward(x, pos, B, T, D, stream),
                           "position_forward_kernel");
}

void position_embedding_backward(const float* dx, float* dpos, int64_t B, int64_t T, int64_t D, cudaStream_t stream) {
  CLEAVE_ASSERT(B >= 0 && T >= 0 && D > 0, "cuda position_embedding_backward: bad shape B={} T={} D={}", B, T, D);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_position_embedding_backward(dx, dpos, B, T, D, stream),
                           "position_backward_kernel");
}

void check_ids_status(const uint32_t* bad_position, const int32_t* ids, int64_t vocab, cudaStream_t stream) {
  const std::optional<int64_t> position = read_index_status(bad_position, stream);
  if (!position) return;
  const int32_t id = read_device_int32(ids + *position, stream);
  CLEAVE_THROW(
      "embedding: token id {} at position {} is out of range [0, {}) (vocab_size {}); check that the data was "
      "tokenized with this model's vocabulary",
      id, *position, vocab, vocab);
}

}  // namespace cleave::kernels::cuda
