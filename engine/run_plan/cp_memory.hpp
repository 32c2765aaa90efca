// Context parallelism in the memory plan: what a cp attention core keeps beyond one rank's (the stash and the
// backward's extra bytes, add_cp_attention_state) and its K/V exchange buffers (cp_exchange_bytes, declared in
// memory_plan.hpp). Invariant: both follow the buffers layers/ring_attention.cpp and layers/ulysses.cpp allocate,
// per attention block and sample (the stash, whole-sequence f32 bytes like the cost model's, ÷ cp by the caller) or
// per micro-batch (the exchange, in the compute dtype); a block without attention adds nothing.
#pragma once

#include "partition/cost_model.hpp"

namespace cleave::run_plan {

// Adds to `cost` (one tp rank's, per sample) what the cp attention core of `block` keeps beyond the one-rank core.
void add_cp_attention_state(partition::BlockCost& cost, const partition::BlockSpec& block,
                            partition::Recompute recompute, int tp, bool ring);

}  // namespace cleave::run_plan
