// Helpers the families' spec builders share (partition/families/<family>.cpp): the size checks, the block
// constructors and the language models' first and last blocks (gpt and llama, and moe through llama). Internal
// to partition/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "partition/model_spec.hpp"

namespace cleave::partition::spec_util {

// The language models' blocks (gpt, llama, moe: Family::blocks_are): token_embedding_block, one per layer, the final
// norm and append_lm_head_and_loss's two.
inline constexpr std::string_view kLanguageModelBlocks =
    "its embedding, the model.n_layers transformer blocks, final norm, head and loss";

// Throws ConfigKeyError "model.<key>: must be > 0, got <value>" unless value > 0.
void check_positive(std::int64_t value, std::string_view key);

// Throws ConfigKeyError "model.d_model: ..." unless n_heads divides d_model (each head gets d_model / n_heads
// columns); both sizes already checked > 0.
void check_heads_divide_d_model(std::int64_t d_model, std::int64_t n_heads);

// The fields every block has: what it is, its name, its per-sample boundary shapes and (0 where unused)
// its feature sizes; the kind-specific fields are set by the caller.
BlockSpec make_block(BlockKind kind, std::string name, const Shape& input, const Shape& output,
                     std::int64_t in_features = 0, std::int64_t out_features = 0);

// The softmax cross-entropy block over `classes` logits (named "loss"); the caller sets vocab_size for tokens.
BlockSpec make_loss_block(const Shape& logits, std::int64_t classes);

// A language model's first block: token ids [t] (i32) to [t, d] from a vocabulary of `v`; `positions` is the
// learned position table's length (0: none, positions are rotary inside the attention).
BlockSpec token_embedding_block(std::int64_t t, std::int64_t d, std::int64_t v, std::int64_t positions);

// A language model's last blocks, after its final norm: the LM head [t, d] -> [t, v] and the loss over its
// logits. With `tied` the head reads the first block's token table, and spec.tied_parameters names it.
void append_lm_head_and_loss(ModelSpec& spec, std::int64_t t, std::int64_t d, std::int64_t v, bool tied);

}  // namespace cleave::partition::spec_util
