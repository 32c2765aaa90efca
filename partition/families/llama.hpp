// The llama family below the layers (Llama 2/3, TinyLlama, SmolLM...): RMSNorm, rotary positions,
// grouped-query attention, SwiGLU, no biases, untied embeddings by default. Its config keys (model.* for
// model.type "llama"), their defaults and checks, its block list, its tensor-parallel rules and the llama
// block's costs (llama_block.cpp). Layer builder: layers/families/llama.cpp; config fields:
// engine/config/fields.hpp kLlamaFields; Hugging Face (LlamaForCausalLM) names: engine/hf/hf_layout.cpp.
//
// Block order: embedding (token table only), llama block × n_layers, final rmsnorm, lm head, softmax
// cross-entropy; block names as gpt's ("embed", "blocks.<i>", "final_norm", "head", "loss").
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/dtype.hpp"

namespace cleave::partition {

struct BlockSpec;
struct ModelSpec;
struct ParamTensor;
struct Family;
struct BlockRules;
struct TpBlockComm;
struct TokenSizes;
struct BlockWork;  // partition/block_work.hpp
struct PassWork;

// 0 in n_kv_heads / ffn_hidden_size / max_seq_len means "not given" (resolved by llama_defaults).
// max_seq_len: the longest sequence the model's positions serve (a Hugging Face model's
// max_position_embeddings); rotary positions need no table, so any seq_len up to it trains the same weights.
// sliding_window: each query attends to the last sliding_window keys, itself included (Mistral); 0 = every
// earlier key; sliding_window_from_layer: the window applies to blocks i >= it only (Qwen2's max_window_layers; 0:
// every block). qkv_bias: q, k and v projections carry biases (Qwen2). qk_norm: q and k pass an RMSNorm over
// each head's head_dim columns (one learned scale [head_dim] each, eps norm_eps) before the rotary embedding
// (Qwen3).
struct LlamaConfig {
  std::int64_t vocab_size = 256;
  std::int64_t d_model = 64;
  std::int64_t n_layers = 2;
  std::int64_t n_heads = 4;
  std::int64_t n_kv_heads = 0;       // 0 = n_heads (plain multi-head attention)
  std::int64_t seq_len = 32;
  std::int64_t ffn_hidden_size = 0;  // 0 = llama_ffn_hidden_size(d_model)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  std::int64_t max_seq_len = 0;      // 0 = seq_len
  std::int64_t sliding_window = 0;   // 0 = full causal attention
  std::int64_t sliding_window_from_layer = 0;  // blocks below it attend to every earlier key
  bool qkv_bias = false;
  bool qk_norm = false;
};

// Llama's MLP width rule: 2/3 of 4 · d_model (integer), rounded up to a multiple of 64.
std::int64_t llama_ffn_hidden_size(std::int64_t d_model);
// `config` with n_kv_heads and ffn_hidden_size resolved where they are 0.
LlamaConfig llama_defaults(LlamaConfig config);

// Checks the sizes (ConfigKeyError naming model.<key> and the numbers) and builds the block list.
ModelSpec make_llama_spec(const LlamaConfig& config);

// The llama rules the moe family (a llama with a mixture feed-forward) shares: its token sizes, its
// tensor-parallel check (ConfigKeyError naming the first of n_heads, n_kv_heads, ffn_hidden_size that tp does
// not divide; `ffn_share` says what each rank holds of ffn_hidden_size) and the tp sizes it allows.
TokenSizes llama_token_sizes(const LlamaConfig& config);
void check_llama_tensor_parallel(const LlamaConfig& config, int tp_size, const char* ffn_share);
std::vector<std::int64_t> llama_tp_sizes(const LlamaConfig& config);

// The family's rows in the tables of family.hpp.
Family llama_family();
BlockRules llama_block_rules();  // llama_block.cpp
// One tp rank's tensors of a llama attention (q, k, v with their Qwen2 biases, o, the Qwen3 q/k norms), in the
// layer's order (layers/llama/llama_block.cpp make_llama_attention); moe's block has the same attention.
std::vector<ParamTensor> llama_attention_tensors(const BlockSpec& block, int tp);  // llama_block.cpp
// The tp collectives of a llama attention (cost_model.hpp, tp_block_comm): its region (q|k|v ... o) of [T, D] per
// sample, added to `c` (add_tp_region), and at plain tp the Qwen3 q/k norms' weight-gradient all-reduces ([head_dim]
// f32 each, once per micro-batch; under sequence parallelism those gradients are summed over tp once per step with
// the other replicated ones); moe's block has the same attention.
void add_llama_attention_tp_comm(TpBlockComm& c, const BlockSpec& block, DType dtype,
                                 bool sequence_parallel);  // llama_block.cpp
// The roofline work of a llama block's first half for a micro-batch on one tp rank (block_work.hpp): the RMSNorm,
// q, k, v, rope, the attention core, the Qwen3 q/k norms, o and the residual add fused into the second RMSNorm; what
// the feed-forward and the last residual add follow (moe's block: its mixture). `core_forward` receives the attention
// core's forward (what selective recomputation reruns). Recomputation is the caller's.
BlockWork llama_attention_work(const BlockSpec& block, DType dtype, int tp, std::int64_t micro_batch,
                               bool sequence_parallel, PassWork& core_forward);  // llama_block.cpp

}  // namespace cleave::partition
