// The attention core both attention layers share (CausalSelfAttention, LlamaAttention): packed qkv of this
// rank's tokens and heads in, the attention output out, in every context-parallel mode (Context::cp):
//  - cp = 1: ops::attention_forward / attention_backward on the whole sequence;
//  - all_to_all: qkv is exchanged to all tokens of L / cp heads (layers/context_parallel/ulysses.hpp), the same
//    ops run on that, and the output is exchanged back; backward mirrors it;
//  - ring: layers/context_parallel/ring_attention.hpp (K/V blocks rotated around the cp group).
// qkv [B, Tl, 3·L·hd] (q | k | v, attention_forward's layout), out [B, Tl, L·hd], dqkv like qkv.
//
// Stash: forward sets stash.tensors to what backward needs ({core qkv, probs}, {core qkv} when `recompute`
// drops the probabilities, which backward then rebuilds from it); backward clears stash.tensors.
#pragma once

#include <cstdint>

#include "layers/layer.hpp"

namespace cleave::layers {

Tensor attention_core_forward(Context& ctx, const Tensor& qkv, std::int64_t heads, std::int64_t head_dim,
                              bool recompute, Stash& stash, const std::string& who);
Tensor attention_core_backward(Context& ctx, const Tensor& dout, std::int64_t heads, std::int64_t head_dim,
                               bool recompute, Stash& stash, const std::string& who);

// One sample's run of tokens as a [1, length, C] view of x [B, T, C] (sample b, tokens [begin, begin + length)).
Tensor token_run(const Tensor& x, std::int64_t b, std::int64_t begin, std::int64_t length);

}  // namespace cleave::layers
