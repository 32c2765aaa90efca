// Token and learned position embeddings on the GPU (twins of kernels/cpu/embedding.hpp).
//
// Invariant: token ids are user data. The forward cannot throw, so an id outside [0, vocab) gives a zero row
// and its position is recorded in `bad_position` (index_status.hpp); check_ids_status turns that into the CPU
// kernel's message. Forward writes out / updates x in place; backward ACCUMULATES (+=) into the table
// gradients in token order for every row of the table, as the CPU kernel does, so the result is deterministic
// and bit-identical to it: the tokens are bucketed by id (counting sort, stable by position) in the caller's
// workspace and each touched row is summed by one block, in token order. Launch on `stream`, no host wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace cleave::kernels::cuda {

// out[i, :] = table[ids[i], :] for i < n_tokens; table is [vocab, dim].
void embedding_forward(const int32_t* ids, const float* table, float* out, uint32_t* bad_position, int64_t n_tokens,
                       int64_t dim, int64_t vocab, cudaStream_t stream);

// dtable[ids[i], :] += dout[i, :] (ids outside [0, vocab) are skipped; the forward has recorded them).
// workspace: embedding_backward_workspace_size(n_tokens, vocab) bytes.
std::size_t embedding_backward_workspace_size(int64_t n_tokens, int64_t vocab);
void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens, int64_t dim,
                        int64_t vocab, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// x[b, t, :] += pos[t, :]; x is [B, T, D], pos is at least [T, D].
void position_embedding_forward(float* x, const float* pos, int64_t B, int64_t T, int64_t D, cudaStream_t stream);

// dpos[t, :] += sum_b dx[b, t, :], b in order (bit-identical to the CPU kernel).
void position_embedding_backward(const float* dx, float* dpos, int64_t B, int64_t T, int64_t D, cudaStream_t stream);

// Blocks on `stream`; throws Error naming the id, its position and the vocabulary if `bad_position` is set.
void check_ids_status(const uint32_t* bad_position, const int32_t* ids, int64_t vocab, cudaStream_t stream);

namespace detail {
cudaError_t launch_embedding_forward(const int32_t* ids, const float* table, float* out, uint32_t* bad_position,
                                     int64_t n_tokens, int64_t dim, int64_t vocab, cudaStream_t stream);
cudaError_t launch_embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens,
                                      int64_t dim, int64_t vocab, int32_t* workspace, cudaStream_t stream);
cudaError_t launch_position_embedding_forward(float* x, const float* pos, int64_t B, int64_t T, int64_t D,
                                              cudaStream_t stream);
cudaError_t launch_position_embedding_backward(const float* dx, float* dpos, int64_t B, int64_t T, int64_t D,
                                               cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
