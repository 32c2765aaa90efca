// Checked entry points for the embedding kernels (embedding.hpp); the kernels are in embedding.cu.
#include "kernels/cuda/embedding.hpp"

#include <limits>

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {
namespace {

void check_range(const char* op, int64_t n_tokens, int64_t dim, const EmbeddingRange& r) {
  CLEAVE_ASSERT(n_tokens >= 0 && dim > 0 && r.vocab > 0 && r.first >= 0 && r.valid >= 0 && r.first + r.valid <= r.vocab,
                "cuda {}: bad shape n_tokens={} dim={} vocab={} shard [{}, {})", op, n_tokens, dim, r.vocab, r.first,
                r.first + r.valid);
  CLEAVE_ASSERT(n_tokens < std::numeric_limits<int32_t>::max() && r.vocab < std::numeric_limits<int32_t>::max(),
                "cuda {}: {} tokens or vocabulary {} exceed 31 bits", op, n_tokens, r.vocab);
}

}  // namespace

void embedding_forward(const int32_t* ids, const void* table, FloatType table_type, void* out, FloatType out_type,
                       uint64_t* status, int64_t n_tokens, int64_t dim, const EmbeddingRange& range,
                       cudaStream_t stream) {
  check_range("embedding_forward", n_tokens, dim, range);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_embedding_forward(ids, table, table_type, out, out_type, status, n_tokens,
                                                            dim, range, stream),
                           "embedding_forward_kernel");
}

std::size_t embedding_backward_workspace_size(int64_t n_tokens, int64_t valid) {
  return static_cast<std::size_t>(3 * valid + 1 + 2 * n_tokens) * sizeof(int32_t);
}

void embedding_backward(const int32_t* ids, const void* dout, FloatType dout_type, float* dtable, int64_t n_tokens,
                        int64_t dim, const EmbeddingRange& range, void* workspace, std::size_t workspace_bytes,
                        cudaStream_t stream) {
  check_range("embedding_backward", n_tokens, dim, range);
  const std::size_t needed = embedding_backward_workspace_size(n_tokens, range.valid);
  CLEAVE_ASSERT(workspace_bytes >= needed && workspace != nullptr,
                "cuda embedding_backward: workspace of {} bytes, {} needed for {} tokens and {} table rows",
                workspace_bytes, needed, n_tokens, range.valid);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_embedding_backward(ids, dout, dout_type, dtable, n_tokens, dim, range,
                                                             static_cast<int32_t*>(workspace), stream),
                           "embedding backward (count/scan/scatter/rank/bucket_sum kernels)");
}

void position_embedding_forward(void* x, FloatType x_type, const void* pos, FloatType pos_type, int64_t B, int64_t T,
                                int64_t D, cudaStream_t stream) {
  CLEAVE_ASSERT(B >= 0 && T >= 0 && D > 0, "cuda position_embedding_forward: bad shape B={} T={} D={}", B, T, D);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_position_embedding_forward(x, x_type, pos, pos_type, B, T, D, stream),
                           "position_forward_kernel");
}

void position_embedding_backward(const void* dx, FloatType dx_type, float* dpos, int64_t B, int64_t T, int64_t D,
                                 cudaStream_t stream) {
  CLEAVE_ASSERT(B >= 0 && T >= 0 && D > 0, "cuda position_embedding_backward: bad shape B={} T={} D={}", B, T, D);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_position_embedding_backward(dx, dx_type, dpos, B, T, D, stream),
                           "position_backward_kernel");
}

}  // namespace cleave::kernels::cuda
