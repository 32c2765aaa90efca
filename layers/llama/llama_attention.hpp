// LlamaAttention: x [B, T, D] -> q, k, v projections (no biases) -> rotary embeddings and grouped-query
// packing (ops::rope_pack_qkv, the Lkv key/value heads once) -> causal (optionally sliding-window)
// memory-efficient grouped-query attention (ops::attention_forward_packed on [B, T, (Lq + 2·Lkv)·hd]) -> o
// projection -> y [B, T, D]. hd = D / n_heads; Lq / Lkv are the query / key-value heads this layer computes.
//
// One implementation serves every layout; only the four projections and the local head counts differ:
//  - one rank: Linears "<prefix>.q" (D -> Hq·hd), ".k" and ".v" (D -> Hkv·hd), ".o" (Hq·hd -> D);
//  - tensor parallel (make_llama_block, llama_block.hpp): q, k, v ColumnParallelLinear (Hq / tp query heads
//    and Hkv / tp key/value heads per rank: rank r's query heads share exactly rank r's kv heads), o
//    RowParallelLinear.
// The q, k, v parts map [B, T, D] to [B, T, Lq·hd], [B, T, Lkv·hd] (twice); the o part [B, T, Lq·hd] to
// [B, T, D]. Positions start at 0 for token 0 of every sample (training sees whole windows).
// Sequence parallelism (Context::sequence_parallel): x and y are sequence shards [B, T/tp, D]; q, k, v
// gather the full sequence and o reduce-scatters back, so the core and rope always see all T positions;
// q, k and v share one all-gather of x and one reduce-scatter (without sequence parallelism: one all-reduce) of their
// summed dx (shared_input.hpp).
//
// Per-head q/k norms (Qwen3, LlamaHeads::qk_norm): q and k each pass a HeadRmsNorm over hd columns per head
// ("<prefix>.q_norm.weight", "<prefix>.k_norm.weight" [hd]) between their projection and the rotary embedding.
//
// Stash layout: tensors {qkv, out [B, T, Lq·hd], lse [B, Lq, T] f32} ({qkv, out} under selective
// recomputation, which rebuilds lse), children {q, k, v, o} (+ {q_norm, k_norm} with qk norms); out is o's
// stashed input too. backward_input releases the tensors; the children keep what their weight gradients need.
#pragma once

#include <memory>
#include <string>

#include "kernels/ops/ops.hpp"
#include "layers/attention.hpp"
#include "layers/layer.hpp"
#include "layers/parallel/shared_input.hpp"

namespace cleave::layers {

struct LlamaHeads {
  std::int64_t d_model = 0;
  std::int64_t n_heads = 0, n_kv_heads = 0;          // of the whole model
  std::int64_t local_heads = 0, local_kv_heads = 0;  // this layer's share
  float rope_theta = 10000.0f;
  std::int64_t window = 0;  // sliding window: query t attends to keys t-window+1..t; 0 = keys 0..t
};

// The optional per-head norms of q and k (both or neither; HeadRmsNorm layers, layers/llama/head_rmsnorm.hpp).
struct QkNorms {
  LayerPtr q, k;
};

class LlamaAttention final : public Layer, public RecomputableScores {
 public:
  LlamaAttention(std::string prefix, const LlamaHeads& heads, LayerPtr q, LayerPtr k, LayerPtr v, LayerPtr o,
                 bool tensor_parallel, QkNorms qk_norms = {});

  std::string_view kind() const override { return tensor_parallel_ ? "parallel_llama_attention" : "llama_attention"; }
  Tensor forward(const Tensor& x, Stash& stash, Context& ctx) override;
  Tensor backward_input(const Tensor& dy, Stash& stash, Context& ctx) override;
  void backward_weight(Stash& stash, Context& ctx) override;
  std::vector<std::shared_ptr<Param>> params() const override;

  // Selective recomputation: forward keeps {qkv, out}; backward_input reruns the attention core to rebuild lse.
  void set_recompute_scores(bool on) override { recompute_scores_ = on; }

 private:
  const std::string& who() const { return who_; }
  std::string make_who() const;
  ops::RopeParams rope_params() const;  // this rank's heads, grouped packing; the offset is set per run
  std::int64_t head_dim() const { return heads_.d_model / heads_.n_heads; }

  std::string prefix_;
  LlamaHeads heads_;
  bool tensor_parallel_ = false;
  bool recompute_scores_ = false;
  LayerPtr q_, k_, v_, o_;
  QkNorms norms_;  // null without qk norms
  SharedInputParts qkv_{{q_.get(), k_.get(), v_.get()}};  // one gather / one reduction of dx over tp
  std::string who_ = make_who();  // last: built once from the members above, so no call builds a string
};

}  // namespace cleave::layers
