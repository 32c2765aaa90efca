// Context parallelism in the memory plan: what a cp attention core keeps beyond one rank's (the stash and the
// backward's extra bytes, add_cp_attention_state) and its K/V exchange buffers (cp_exchange_bytes, declared in
// memory_plan.hpp). Invariant: both follow the buffers layers/ring_attention.cpp and layers/ulysses.cpp allocate,
// per attention block and sample (the stash, whole-sequence f32 bytes like the cost model's, ÷ cp by the caller) or
// per micro-batch (the exchange, in the compute dtype); a block without attention adds nothing. Besides, what a
// family's block keeps whole on every cp rank (BlockRules::cp_whole_stash_bytes: moe's expert counts), added by
// add_cp_whole_stash.
#pragma once

#include "engine/run_plan/memory_plan.hpp"
#include "partition/cost_model.hpp"

namespace cleave::run_plan {

// Adds to `cost` (one tp rank's, per sample, f32) what the cp attention core of `block` keeps beyond the one-rank
// core: to its stash, and to its backward's peak as the larger of that peak and the level the block holds in the
// core's phase (`sequence_parallel`: the residual stream's gradients are shards; less what the block's backward freed
// of its stash before, BlockRules::cp_core_backward_released_bytes, at `cp` ranks; under full recomputation over the
// rebuilt stash) plus the core's extras. `bf16_cost`: the block's bf16 cost under bf16 (null in fp32), whose f32 and
// integer bytes the walk counts whole: the phases are compared in the walk's units (the caller adds 2 x bf16 - f32
// to each field afterwards).
void add_cp_attention_state(partition::BlockCost& cost, const partition::BlockSpec& block,
                            partition::Recompute recompute, int tp, int cp, bool ring, bool sequence_parallel,
                            const partition::BlockCost* bf16_cost);

// Adds to `cost` (per sample, in the walk's units: the walk divides by cp and, under bf16, by 2) the bytes `block`
// keeps whole on every cp rank (BlockRules::cp_whole_stash_bytes), so multiplied by cp (and by 2 under bf16: they
// are integers): to its forward stash, or, under full recomputation, inside its backward (the first forward keeps
// none: the rerun's is held through backward_input).
void add_cp_whole_stash(partition::BlockCost& cost, const partition::BlockSpec& block, partition::Recompute recompute,
                        int cp, bool bf16);

// The buffers one attention block holds only while it runs, for the activation walk (BlockTransients): the cp K/V
// exchange (cp_exchange_bytes' buffers, in the compute dtype) and, with the run's CPU kernels (`threads` > 0), the
// attention kernel's scratch. As layers/context_parallel and kernels/cpu/flash_attention allocate them:
//  - cp 1: the kernel's scratch while dq, dk, dv are allocated (at the block's backward peak; in the forward on
//    top of the block's stash).
//  - ring (ring_attention.cpp), U one rank's K and V blocks: the forward holds the next block in flight and, from
//    step 1, the received one (U at cp 2, 2U from cp 3), the partial output and log-sum-exp and the kernel's scratch
//    on chunk pairs of T / 2cp tokens; the backward's loop holds the travelling dK/dV, its rotation target and the
//    K/V in flight (3U at cp 2, 4U from cp 3) before dqkv [T, Q + 2K] is allocated, the kernel's scratch only
//    inside a step's block calls, before the rotation target (one f32 dK/dV set) is allocated: never both; then
//    the held block and dK/dV (2U) while dqkv is assembled, the block's backward peak (measured at GPipe cp2, gpt
//    and llama: the allocator's total peak holds the activation peak and 2U).
//  - all_to_all (ulysses.cpp): cp send and cp - 1 receive blocks of the tensor exchanged, alive until its
//    reassembled copy is allocated, q | k | v there in the forward and dqkv back at the end of the backward: at the
//    block's backward peak for llama and moe, one [T, D] under it where the core runs the qkv projection's backward
//    after them (BlockRules::cp_qkv_backward_inside_core: gpt, whose partial dx [T, D] is its peak); the kernel's
//    scratch over the whole sequence (heads / cp) before dqkv is exchanged back (measured: gpt and llama, cp2 and cp4,
//    the total to the byte less the loss slots).
// Empty for a block without attention, and at cp 1 without threads.
// At cp 1 the scratch is placed at the block's backward peak; place_attention_scratch_at_core_level then lowers it
// to the level the block holds while its attention core's backward runs, where that is under the peak.
BlockTransients attention_transients(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp, bool ring,
                                     bool bf16, int threads);

// At cp 1 without recomputation: the attention kernel's backward scratch (`transients`, attention_transients') is
// alive while the block's attention core runs its backward, at the level the block holds then (the one
// add_cp_attention_state reads: the residual stream's gradients, dout and dq, dk, dv, less what the block's backward
// released before; walk units), not at the block's backward peak (`cost`, rank_block_cost's, the walk's units) where
// another phase is higher: moe's experts and combine phase, whose peak is above the attention core's by more than
// the scratch at ep 2 and 4 (the total was 44,288 B over the measured peak on every rank, +1.2-3.1% at seq_len 64,
// MemoryPlanTotal.ExpertParallelWithinTwoPercent). Unchanged where the core's phase is the peak, and for families
// whose level is not read from their layers.
void place_attention_scratch_at_core_level(BlockTransients& transients, const partition::BlockCost& cost,
                                           const partition::BlockSpec& block, int tp, bool sequence_parallel,
                                           bool bf16);

}  // namespace cleave::run_plan
