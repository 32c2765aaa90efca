// Learned position embeddings at the global positions of this rank's tokens (Context::cp): what the
// embeddings (Embedding, VocabParallelEmbedding) call instead of indexing the table from 0.
//
// x [B, n, D] holds local tokens [first, first + n) of a rank holding `local_tokens` per sample (T / cp; under
// sequence parallelism a tp shard of them). Without context parallelism this is one op on pos rows
// [first, first + n), exactly the call the embeddings made before; under cp one op per sample and per run of
// consecutive global positions (CpLayout::segments).
#pragma once

#include <cstdint>

#include "layers/layer.hpp"

namespace cleave::layers {

// x += pos[global position of each token].
void add_positions(const Context& ctx, const Tensor& x, const Tensor& pos, std::int64_t local_tokens,
                   std::int64_t first);
// dpos[global position] += sum over samples of dx (ACCUMULATES, token order within each run).
void add_position_grads(const Context& ctx, const Tensor& dx, const Tensor& dpos, std::int64_t local_tokens,
                        std::int64_t first);

}  // namespace cleave::layers
