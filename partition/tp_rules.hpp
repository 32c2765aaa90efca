// Which tensor-parallel sizes a model allows, and the per-rank boundary shapes that follow: pure rules over
// the model config, no layers, no devices. The layer builders (layers/models/builder.cpp, through
// layers/parallel/tp_layout.hpp), the plan and the config layer all run these same checks, so the rule is
// written once. Errors are ConfigKeyError naming the key at
// fault, the numbers and the sizes that work:
//   model.n_heads: 6 is not divisible by parallel.tensor_model_parallel_size 4: ...; use tp in {1, 2, 3, 6}
//
// Rules: only families with Family::check_tensor_parallel (partition/families/family.hpp: gpt and llama) can
// be split, by their own rules (partition/families/<family>.cpp): every tp rank needs whole attention heads (tp
// divides n_heads, so tp <= n_heads; llama: n_kv_heads too) and an equal share of the MLP width (tp divides
// d_ff; llama: ffn_hidden_size). The vocabulary needs nothing:
// it is padded up to a multiple of tp (ShardSpec padding) and the padding is excluded from the loss.
#pragma once

#include <cstdint>
#include <vector>

#include "partition/model_spec.hpp"

namespace cleave::partition {

// Throw ConfigKeyError unless tp_size >= 1.
void check_tp_size(int tp_size);

// Every tp size that divides both n_heads and d_ff, ascending (a size given as 0 imposes nothing).
std::vector<std::int64_t> allowed_tp_sizes(std::int64_t n_heads, std::int64_t d_ff);

// Throw ConfigKeyError unless tp_size (>= 1) divides n_heads / d_ff; `d_ff` / `n_heads` only sharpen the
// list of sizes the message suggests (0 = unknown).
void check_tp_heads(std::int64_t n_heads, int tp_size, std::int64_t d_ff = 0);
void check_tp_d_ff(std::int64_t d_ff, int tp_size, std::int64_t n_heads = 0);

// The whole model: tp_size >= 1; tp_size > 1 needs model.type gpt or llama and the rules above.
void check_tensor_parallel(const ModelSpec& spec, int tp_size);

// Sequence parallelism (parallel.sequence_parallel): throws ConfigKeyError unless tp_size > 1 and tp_size
// divides model.seq_len (each tp rank holds T / tp tokens of every sample). A no-op when `on` is false.
void check_sequence_parallel(const ModelSpec& spec, int tp_size, bool on);

// Per-sample (no batch dimension) shapes of the tensors one tp rank's layer for `block` consumes and
// produces. Every boundary tensor of a tensor-parallel gpt is replicated (block.input / block.output)
// except the vocab-parallel logits between the lm head and the loss: [T, ceil(V / tp)] on each rank. A
// pipeline boundary between those two blocks carries that local shape (tp rank r to tp rank r).
// With `sequence_parallel` the residual stream is split along the sequence: the embedding's output, the
// transformer blocks' and the final norm's input and output and the lm head's input are [T / tp, D]
// (tp rank r's tokens), so a pipeline boundary there carries 1/tp of the bytes.
Shape tp_block_input(const BlockSpec& block, int tp_size, bool sequence_parallel = false);
Shape tp_block_output(const BlockSpec& block, int tp_size, bool sequence_parallel = false);

}  // namespace cleave::partition
