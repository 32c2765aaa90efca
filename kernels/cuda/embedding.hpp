// Token and learned position embeddings on the GPU (twins of kernels/cpu/embedding.hpp).
//
// A table may be a tensor-parallel shard: it holds rows [first, first + valid) of a vocabulary of `vocab` ids as
// its rows [0, valid). The forward writes the row of an id in that range and zeros for any other id; the
// backward adds only the rows the shard holds (the whole table is first 0, valid == vocab).
//
// Invariant: token ids are user data. The forward cannot throw, so an id outside [0, vocab) gives a zero row
// and (position, id) is recorded in the status word (index_status.hpp); the caller turns it into the CPU
// kernel's message where it synchronises anyway. Forward writes out / updates x in place; backward
// ACCUMULATES (+=) into the f32 table gradient in token order for every row, as the CPU kernel does, so the
// result is deterministic and bit-identical to it: the tokens are bucketed by local id (counting sort, stable
// by position) in the caller's workspace and each touched row is summed by one block, in token order.
// Tables, outputs and incoming gradients are f32 or bf16 (FloatType; bf16 is widened exactly, so a bf16
// forward is a bit copy and the backward sums the same f32 values as the CPU's widened copy). Launch on
// `stream`, no host wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/float_type.hpp"

namespace cleave::kernels::cuda {

struct EmbeddingRange {
  int64_t first = 0;  // vocabulary id of the table's row 0
  int64_t valid = 0;  // rows of the table that are real vocabulary rows
  int64_t vocab = 0;  // ids are checked against [0, vocab)
};

// out[i, :] = table[ids[i] - first, :] when the id lies in the range, else zeros (a bit copy when the dtypes
// agree; widened or rounded when they differ).
void embedding_forward(const int32_t* ids, const void* table, FloatType table_type, void* out, FloatType out_type,
                       uint64_t* status, int64_t n_tokens, int64_t dim, const EmbeddingRange& range,
                       cudaStream_t stream);

// dtable[ids[i] - first, :] += dout[i, :] for ids in the range (others skipped; the forward recorded bad ones).
// workspace: embedding_backward_workspace_size(n_tokens, range.valid) bytes.
std::size_t embedding_backward_workspace_size(int64_t n_tokens, int64_t valid);
void embedding_backward(const int32_t* ids, const void* dout, FloatType dout_type, float* dtable, int64_t n_tokens,
                        int64_t dim, const EmbeddingRange& range, void* workspace, std::size_t workspace_bytes,
                        cudaStream_t stream);

// x[b, t, :] += pos[t, :]; x is [B, T, D], pos is at least [T, D]; x and pos f32 or bf16 each.
void position_embedding_forward(void* x, FloatType x_type, const void* pos, FloatType pos_type, int64_t B, int64_t T,
                                int64_t D, cudaStream_t stream);

// dpos[t, :] += sum_b dx[b, t, :], b in order (bit-identical to the CPU kernel); dx f32 or bf16.
void position_embedding_backward(const void* dx, FloatType dx_type, float* dpos, int64_t B, int64_t T, int64_t D,
                                 cudaStream_t stream);

namespace detail {
cudaError_t launch_embedding_forward(const int32_t* ids, const void* table, FloatType table_type, void* out,
                                     FloatType out_type, uint64_t* status, int64_t n_tokens, int64_t dim,
                                     const EmbeddingRange& range, cudaStream_t stream);
cudaError_t launch_embedding_backward(const int32_t* ids, const void* dout, FloatType dout_type, float* dtable,
                                      int64_t n_tokens, int64_t dim, const EmbeddingRange& range, int32_t* workspace,
                                      cudaStream_t stream);
cudaError_t launch_position_embedding_forward(void* x, FloatType x_type, const void* pos, FloatType pos_type,
                                              int64_t B, int64_t T, int64_t D, cudaStream_t stream);
cudaError_t launch_position_embedding_backward(const void* dx, FloatType dx_type, float* dpos, int64_t B, int64_t T,
                                               int64_t D, cudaStream_t stream);
}  // namespace detail

}  // namespace cleave::kernels::cuda
