// The all-to-all exchange of DeepSpeed-Ulysses context parallelism (parallel.context_parallel_comm
// "all_to_all"; docs/multi-rank.md#context-parallelism).
//
// Before attention every cp rank holds its contiguous chunk of Tl = T / cp tokens for all L local heads; the
// exchange gives it every token for L / cp heads (rank r: heads [r·L/cp, (r+1)·L/cp)), so any attention kernel
// runs unchanged on whole sequences; the reverse exchange after attention returns to chunks of all heads.
// A tensor here is blocks ("parts") of heads of hd columns side by side per token: qkv is q | k | v with
// {Hq, Hkv, Hkv} heads, an attention output one part of Hq heads (the attention ops' layouts). Every part's
// head count must be divisible by cp; rank r takes heads [r·H/cp, (r+1)·H/cp) of every part, so query head
// groups keep their kv head (GQA).
//
//   seq_to_heads: [B, Tl, ΣH·hd] (chunk of all heads) -> [B, T, Σ(H/cp)·hd] (all tokens of my heads)
//   heads_to_seq: the inverse.
//
// Each is one batch_p2p over ctx.cp_comm (a send and a receive per peer; the own block is copied), with
// per-peer buffers packed and unpacked by ops::copy_2d (kCommunication, freed on return). Blocking: the result
// is complete on return. Values move without arithmetic, so the results are bit-exact. The part, buffer and op
// lists sit in fixed arrays (at most kMaxParts parts; up to kInlinePeers cp ranks), so a call allocates nothing
// but its tensors (the allocator's cached blocks); a wider cp group keeps its per-peer lists on the heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "layers/layer.hpp"

namespace cleave::layers {

inline constexpr std::size_t kMaxParts = 3;      // q | k | v
inline constexpr std::size_t kInlinePeers = 16;  // cp ranks whose lists fit in place

Tensor seq_to_heads(Context& ctx, const Tensor& x, std::initializer_list<std::int64_t> part_heads,
                    std::int64_t head_dim);
Tensor heads_to_seq(Context& ctx, const Tensor& y, std::initializer_list<std::int64_t> part_heads,
                    std::int64_t head_dim);

}  // namespace cleave::layers
