// The attention core both attention layers share (CausalSelfAttention, LlamaAttention): packed qkv of this
// rank's tokens and heads in, the attention output out, in every context-parallel mode (Context::cp):
//  - cp = 1: ops::attention_forward_packed / attention_backward_packed (memory-efficient attention: out and
//    the per-row log-sum-exp lse, nothing of size T x T) on the whole sequence;
//  - all_to_all: qkv is exchanged to all tokens of L / cp heads (layers/context_parallel/ulysses.hpp), the same
//    ops run on that, and the output is exchanged back; backward mirrors it;
//  - ring: layers/context_parallel/ring_attention.hpp (K/V blocks rotated around the cp group).
// qkv [B, Tl, (L + 2·Lkv)·hd] (q | k | v of L query and Lkv key/value heads, attention_forward's layout; Lkv
// divides L: grouped-query attention runs on the Lkv heads as they are, nothing repeated), out [B, Tl, L·hd],
// dqkv like qkv.
//
// Stash: forward sets stash.tensors to what backward needs ({core qkv, out, lse}, {core qkv, out} when
// `recompute` drops the statistics, which backward then rebuilds from core qkv; ring: ring_attention.hpp);
// backward clears stash.tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "layers/layer.hpp"

namespace cleave::layers {

// `window`: Mistral's sliding window in keys (0: none), in every mode (ring skips the chunk pairs outside it).
Tensor attention_core_forward(Context& ctx, const Tensor& qkv, std::int64_t heads, std::int64_t kv_heads,
                              std::int64_t head_dim, std::int64_t window, bool recompute, Stash& stash,
                              const std::string& who);
// `dout_of` computes dout (the output projection's backward): called after a recomputed core has rebuilt its
// statistics, so the allocations happen in the order the memory plan counts (the rebuilt lse lives through the whole
// backward of the core, the scratch output is freed at once).
// `then` (optional) continues with dqkv (the qkv projection's backward) while the core's saved tensors are still
// held, and its result is returned instead of dqkv: GPT's layer keeps them through that backward, as the memory
// plan counts; Llama's releases them first (no `then`).
Tensor attention_core_backward(Context& ctx, const std::function<Tensor()>& dout_of, std::int64_t heads,
                               std::int64_t kv_heads, std::int64_t head_dim, std::int64_t window, bool recompute,
                               Stash& stash, const std::string& who,
                               const std::function<Tensor(const Tensor&)>& then = {});
// [B, Tl]: the batch and this rank's token count of the micro-batch whose core state `stash` holds.
std::pair<std::int64_t, std::int64_t> attention_core_tokens(const Context& ctx, const Stash& stash, bool recompute,
                                                            const std::string& who);

// One sample's run of tokens as a [1, length, C] view of x [B, T, C] (sample b, tokens [begin, begin + length)).
Tensor token_run(const Tensor& x, std::int64_t b, std::int64_t begin, std::int64_t length);

}  // namespace cleave::layers
