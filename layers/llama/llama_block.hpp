// The Llama block (pre-RMSNorm): x1 = x + attn(attn_norm(x)); y = x1 + mlp(mlp_norm(x1)), with LlamaAttention
// (rope, grouped-query heads) and SwigluMlp. Parameters (no biases; the names transformers' Llama maps to):
//   <prefix>.attn_norm.weight [D]          <prefix>.mlp_norm.weight [D]        (init 1, no weight decay)
//   <prefix>.attn.q.weight [Hq·hd, D]      <prefix>.mlp.gate.weight [F, D]
//   <prefix>.attn.k.weight [Hkv·hd, D]     <prefix>.mlp.up.weight [F, D]
//   <prefix>.attn.v.weight [Hkv·hd, D]     <prefix>.mlp.down.weight [D, F]
//   <prefix>.attn.o.weight [D, Hq·hd]
//   <prefix>.attn.q_norm.weight [hd]       <prefix>.attn.k_norm.weight [hd]   (block.qk_norm only: Qwen3)
// Projections start normal(0, init.std) (transformers' initializer_range 0.02, no residual scaling).
//
// make_llama_block builds every layout: tp_size 1 gives Linears; tp_size > 1 this tp rank's shards (q, k,
// v, gate, up column-parallel; o and down row-parallel; norms and residuals replicated), with the values of
// the one-rank block's slices. As in the GPT block (layers/parallel/parallel_transformer_block.hpp) every
// replicated tensor is the same on every tp rank, so the replicated norms need no extra all-reduce.
// Communication per block and micro-batch at tp > 1: forward all-reduces o's and down's outputs; backward
// all-reduces the input gradients of q, k, v, gate and up.
//
// The residual wiring is TransformerBlock's (layers/transformer_block.hpp, family kLlama: kind "llama_block" /
// "parallel_llama_block"); only its parts are Llama's. Stash layout: children {attn_norm, attn, mlp_norm, mlp};
// no tensors of its own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "layers/layer.hpp"
#include "layers/param_init.hpp"
#include "layers/transformer_block.hpp"
#include "partition/model_spec.hpp"

namespace cleave::layers {

// A llama block (partition::BlockKind::kLlamaBlock) for tp rank tp_rank of tp_size. The tp rules
// (partition/tp_rules.hpp) must hold; the builder checks them first.
// The attention of a llama or moe block (its q, k, v, o projections, biased where block.qkv_bias, and the
// per-head q/k norms where block.qk_norm) for tp rank tp_rank of tp_size; named "<block>.attn".
LayerPtr make_llama_attention(const partition::BlockSpec& block, const ParamInit& init, int tp_size, int tp_rank);

std::unique_ptr<TransformerBlock> make_llama_block(const partition::BlockSpec& block, const ParamInit& init,
                                                   int tp_size, int tp_rank);

// A block of llama's shape (the llama block; the moe block, layers/moe/moe_block.hpp) around the feed-forward that
// make_mlp builds (named "<block>.mlp" or "<block>.moe"): attn_norm, make_llama_attention, mlp_norm, then make_mlp(),
// in parameter order, so errors and allocations come in the same order on every layout. Asserts that tp_size
// divides the heads, the kv heads and block.d_ff (`ffn` names d_ff in the message: "ffn", "expert ffn").
std::unique_ptr<TransformerBlock> make_llama_shaped_block(const partition::BlockSpec& block, const ParamInit& init,
                                                          int tp_size, int tp_rank, std::string_view ffn,
                                                          const std::function<LayerPtr()>& make_mlp);

}  // namespace cleave::layers
