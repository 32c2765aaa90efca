// Token and learned position embeddings.
//
// Invariant: token ids are user data and are checked (CLEAVE_CHECK: id in [0, vocab), the message names
// the id, its position and the vocabulary size). Forward writes out / updates x in place; backward
// ACCUMULATES (+=) into the table gradients, in token order, so results are deterministic.
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

// out[i, :] = table[ids[i], :] for i < n_tokens; table is [vocab, dim].
void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n_tokens, int64_t dim,
                       int64_t vocab);

// dtable[ids[i], :] += dout[i, :]. Ids must have been validated by embedding_forward.
void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens, int64_t dim);

// Vocab-parallel forms: `table` holds rows [first, first + valid) of the vocabulary as its rows [0, valid).
// Forward writes the row of an id in that range and zeros for any other id (the tp all-reduce adds the
// shards); every id is still checked against [0, vocab). Backward adds only the rows this shard holds. With
// first 0 and valid == vocab they equal the plain forms bit for bit.
void embedding_forward_shard(const int32_t* ids, const float* table, float* out, int64_t n_tokens, int64_t dim,
                             int64_t vocab, int64_t first, int64_t valid);
void embedding_backward_shard(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens, int64_t dim,
                              int64_t first, int64_t valid);

// x[b, t, :] += pos[t, :]; x is [B, T, D], pos is at least [T, D].
void position_embedding_forward(float* x, const float* pos, int64_t B, int64_t T, int64_t D);

// dpos[t, :] += sum_b dx[b, t, :].
void position_embedding_backward(const float* dx, float* dpos, int64_t B, int64_t T, int64_t D);

}  // namespace cleave::kernels::cpu
