// Context-parallel size rules (parallel.context_parallel_size, parallel.context_parallel_comm): pure rules over
// the model spec, no layers, no devices. The config check, the plan and the planner's candidate list all run
// these, so the rule is written once. Errors are ConfigKeyError naming the key at fault, the numbers and a
// size that works:
//   parallel.context_parallel_size: 3 with context_parallel_comm "ring" cuts each sequence into 2 × 3 = 6
//   chunks, and model.seq_len 64 is not divisible by 6; use context_parallel_size in {1, 2, 4, 8, 16, 32}
//
// Rules: cp = 1 needs nothing. cp > 1 needs a model with attention (gpt, llama: Family::sequence_parallel
// marks the families whose blocks are sequence-wise) and
//  - ring: seq_len divisible by 2·cp (rank r holds chunks r and 2cp-1-r of 2cp equal chunks);
//  - all_to_all: seq_len divisible by cp, and the heads and kv heads of one tp rank divisible by cp (each cp
//    rank computes attention for (heads / tp) / cp heads over the whole sequence);
//  - with sequence parallelism also (seq_len / cp) divisible by tp.
#pragma once

#include <cstdint>
#include <vector>

#include "partition/model_spec.hpp"

namespace cleave::partition {

// Every cp size from 1 to `limit` that satisfies the rules above for this model, ascending.
std::vector<std::int64_t> allowed_cp_sizes(const ModelSpec& spec, int tp_size, bool ring, bool sequence_parallel,
                                           std::int64_t limit = 64);

// Throws ConfigKeyError unless cp_size satisfies the rules above (a no-op for cp_size 1).
void check_context_parallel(const ModelSpec& spec, int tp_size, int cp_size, bool ring, bool sequence_parallel);

// True when `spec` has attention heads a cp group can split the sequence of (gpt, llama).
bool has_attention(const ModelSpec& spec);

}  // namespace cleave::partition
