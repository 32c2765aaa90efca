// Helpers the families' spec builders share (partition/families/<family>.cpp): the positive-size check and
// the block constructors. Internal to partition/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "partition/model_spec.hpp"

namespace cleave::partition::spec_util {

// Throws ConfigKeyError "model.<key>: must be > 0, got <value>" unless value > 0.
void check_positive(std::int64_t value, std::string_view key);

// The fields every block has: what it is, its name, its per-sample boundary shapes and (0 where unused)
// its feature sizes; the kind-specific fields are set by the caller.
BlockSpec make_block(BlockKind kind, std::string name, const Shape& input, const Shape& output,
                     std::int64_t in_features = 0, std::int64_t out_features = 0);

// The softmax cross-entropy block over `classes` logits (named "loss"); the caller sets vocab_size for tokens.
BlockSpec make_loss_block(const Shape& logits, std::int64_t classes);

}  // namespace cleave::partition::spec_util
