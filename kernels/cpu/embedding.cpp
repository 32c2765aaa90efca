// Token and position embeddings. See embedding.hpp. Ids are validated in a serial pass first (an
// exception cannot leave an OpenMP region); gradients are accumulated in token order by column blocks,
// so repeated ids give the same bits whatever the thread count.
#include "kernels/cpu/embedding.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {
namespace {

constexpr int64_t kBlock = 256;  // columns per block of the table gradient

// dst[0, n) += src[0, n). noinline, like every body below: a row body may hold `omp simd`, which a
// CLEAVE_PARALLEL_FOR argument cannot, and both of its branches then run the same code.
[[gnu::noinline]] void add_row(float* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) dst[c] += src[c];
}

// Columns [c0, c0 + kBlock) of the table gradient: every token's row added in token order (the tokens whose id
// is outside the shard [first, first + valid) skipped).
[[gnu::noinline]] void backward_block(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens,
                                      int64_t dim, int64_t first, int64_t valid, int64_t c0) {
  const int64_t width = std::min(kBlock, dim - c0);
  for (int64_t i = 0; i < n_tokens; ++i) {
    const int64_t local = static_cast<int64_t>(ids[i]) - first;
    if (local < 0 || local >= valid) continue;
    add_row(dtable + local * dim + c0, dout + i * dim + c0, width);
  }
}

}  // namespace

void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n_tokens, int64_t dim,
                       int64_t vocab) {
  embedding_forward_shard(ids, table, out, n_tokens, dim, vocab, 0, vocab);
}

void embedding_forward_shard(const int32_t* ids, const float* table, float* out, int64_t n_tokens, int64_t dim,
                             int64_t vocab, int64_t first, int64_t valid) {
  CLEAVE_ASSERT(n_tokens >= 0 && dim > 0 && vocab > 0 && first >= 0 && valid >= 0 && first + valid <= vocab,
                "embedding_forward: bad shape n_tokens={} dim={} vocab={} shard [{}, {})", n_tokens, dim, vocab,
                first, first + valid);
  for (int64_t i = 0; i < n_tokens; ++i) {
    CLEAVE_CHECK(ids[i] >= 0 && ids[i] < vocab,
                 "embedding: token id {} at position {} is out of range [0, {}) (vocab_size {}); check that the "
                 "data was tokenized with this model's vocabulary",
                 ids[i], i, vocab, vocab);
  }
  const auto row_bytes = static_cast<size_t>(dim) * sizeof(float);
  CLEAVE_PARALLEL_FOR(i, n_tokens, detail::worth_parallel(n_tokens * dim),
    const int64_t local = static_cast<int64_t>(ids[i]) - first;
    if (local >= 0 && local < valid) {
      std::memcpy(out + i * dim, table + local * dim, row_bytes);
    } else {
      std::memset(out + i * dim, 0, row_bytes);
    })
}

void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens, int64_t dim) {
  CLEAVE_ASSERT(n_tokens >= 0 && dim > 0, "embedding_backward: bad shape n_tokens={} dim={}", n_tokens, dim);
  for (int64_t i = 0; i < n_tokens; ++i) {
    CLEAVE_ASSERT(ids[i] >= 0, "embedding_backward: negative id {} at position {} (forward validates ids)", ids[i], i);
  }
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  CLEAVE_PARALLEL_FOR(blk, blocks, blocks > 1 && detail::worth_parallel(n_tokens * dim),
                      backward_block(ids, dout, dtable, n_tokens, dim, 0, std::numeric_limits<int64_t>::max(),
                                     blk * kBlock);)
}

void embedding_backward_shard(const int32_t* ids, const float* dout, float* dtable, int64_t n_tokens, int64_t dim,
                              int64_t first, int64_t valid) {
  CLEAVE_ASSERT(n_tokens >= 0 && dim > 0 && first >= 0 && valid >= 0,
                "embedding_backward: bad shape n_tokens={} dim={} shard [{}, {})", n_tokens, dim, first, first + valid);
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  CLEAVE_PARALLEL_FOR(blk, blocks, blocks > 1 && detail::worth_parallel(n_tokens * dim),
                      backward_block(ids, dout, dtable, n_tokens, dim, first, valid, blk * kBlock);)
}

void position_embedding_forward(float* x, const float* pos, int64_t B, int64_t T, int64_t D) {
  CLEAVE_ASSERT(B >= 0 && T >= 0 && D > 0, "position_embedding_forward: bad shape B={} T={} D={}", B, T, D);
  CLEAVE_PARALLEL_FOR(bt, B * T, detail::worth_parallel(B * T * D), add_row(x + bt * D, pos + (bt % T) * D, D);)
}

void position_embedding_backward(const float* dx, float* dpos, int64_t B, int64_t T, int64_t D) {
  CLEAVE_ASSERT(B >= 0 && T >= 0 && D > 0, "position_embedding_backward: bad shape B={} T={} D={}", B, T, D);
  CLEAVE_PARALLEL_FOR(t, T, detail::worth_parallel(B * T * D),
    for (int64_t b = 0; b < B; ++b) add_row(dpos + t * D, dx + (b * T + t) * D, D);)
}

}  // namespace cleave::kernels::cpu
