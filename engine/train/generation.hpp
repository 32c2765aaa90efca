// Generation support: the logits of the token after a window, from a model held whole by one rank (one stage,
// no tensor parallelism). The sampling policy lives in the caller (engine/cli/generate.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train {

// model.vocab_size values for the token after `tokens` (1 <= size <= model.seq_len). Keeps nothing for a
// backward. Throws Error for a model that is not a gpt or is not held whole by this rank.
std::vector<float> next_token_logits(RankSetup& setup, const RankModel& model, const std::vector<std::int32_t>& tokens);

}  // namespace cleave::train
