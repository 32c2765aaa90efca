// The moe block (pre-RMSNorm): x1 = x + attn(attn_norm(x)); y = x1 + moe(mlp_norm(x1)), with llama's attention
// (layers/llama/llama_attention.hpp: rope, grouped-query heads; the same parameter names as a llama block's
// attention) and MoeMlp (moe_mlp.hpp) as the feed-forward. Parameters: llama's <prefix>.attn_norm, .attn.{q,k,v,o},
// .mlp_norm, then MoeMlp's under <prefix>.moe (with block.shared_expert_gate, the shared experts are wrapped in a
// SharedExpertGate, shared_expert_gate.hpp: <prefix>.moe.shared_gate.weight [1, D] after the shared SwiGLU's).
//
// make_moe_block builds every layout: tp_size 1 gives Linears; tp_size > 1 this tp rank's shards (llama's rules
// for the attention; each expert's SwiGLU columns split, MoeMlp's expert tensor parallelism), with the values of
// the one-rank block's slices. The residual wiring is TransformerBlock's (layers/transformer_block.hpp); its
// name is a llama block's ("llama_block" / "parallel_llama_block"): only its feed-forward differs.
#pragma once

#include <memory>

#include "layers/param_init.hpp"
#include "layers/transformer_block.hpp"
#include "partition/model_spec.hpp"

namespace cleave::layers {

// A moe block (partition::BlockKind::kMoeBlock) for tp rank tp_rank of tp_size and ep rank ep_rank of ep_size
// (MoeMlp's expert parallelism); `config` is the spec's
// (router kind and coefficients). The tp rules (partition/families/moe.cpp) must hold.
std::unique_ptr<TransformerBlock> make_moe_block(const partition::BlockSpec& block, const partition::MoeConfig& config,
                                                 const ParamInit& init, int tp_size, int tp_rank, int ep_size = 1,
                                                 int ep_rank = 0);

}  // namespace cleave::layers
