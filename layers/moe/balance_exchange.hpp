// Context parallelism's count exchange for the load-balancing loss (router.hpp balance_over): under cp > 1 a rank
// routes only its part of each sequence, so the aux loss's f_e needs the micro-batch's counts summed over the cp
// group. The sum is needed for the loss's value and for the scale of its gradient (f_e is a constant of the
// Switch / Mixtral loss: its gradient flows through the mean router probabilities P_e only), both read in the
// block's backward_input, never for the forward's outputs. So the forward posts the all-reduce and the backward
// waits for it: nothing blocks in the forward, and by the backward the exchange has long completed.
//
// Ordering (every cp rank must post its collectives in the same order): the post is at the same point of the
// forward as any other of the block's collectives, and every cp rank runs the same actions in the same order
// (the same schedule, the same overlapped pairs' hand-overs: pipeline/overlap_pair.hpp), so the posts match
// whatever the schedule. The wait is a plain Work::wait, not a hand-over point of an overlapped pair (by the
// backward the exchange is done, and a hand-over there would only cost a thread switch); a wait never changes
// the order of posts. A forward that no backward follows (Stash::backward_follows false: the first forward of a
// recomputed block, train.recompute full, layers/recomputed.hpp, and evaluation's) posts nothing, on every cp rank
// alike: under full recomputation the rerun inside the backward posts the one exchange of the block and
// micro-batch, and the backward waits for it after the rerun's experts and its own (bit-identical: the sum is of
// integers). So one exchange per moe block and micro-batch under every schedule and recomputation.
//
// Memory: one row per sample, [B, E + 1] i64 (a sample's counts over its whole sequence, then its tokens), on
// ctx.allocator (MemoryCategory::kActivations) from the forward (under full recomputation: the rerun) to the end
// of backward_input, on every device (the CPU's is host memory, which the MPI backend moves; a GPU's is device
// memory, which NCCL moves). Per sample
// like every stash the memory plan counts: 8 · (E + 1) bytes on each cp rank (partition/families/moe_block.cpp
// moe_cp_whole_stash_bytes). On a GPU the counts are uploaded with an asynchronous copy from a page-locked host
// staging row (Context::upload_staging: a pageable source would make CUDA wait for the stream first) kept until
// the backward reads the sum back (one host wait there): 8 · B · (E + 1) bytes of the memory plan's host line
// (partition/families/moe_staging.hpp). A CPU context given a staging allocator of its own stages the row the same
// way (a test's counting allocator: MoeStaging.* in tests/mpi/moe_staging_test.cpp).
//
// The sum is exact (integers), so results are bit-identical whether the wait is early or late.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "layers/layer.hpp"
#include "layers/moe/router.hpp"

namespace cleave::layers {

// What the forward leaves in flight: the buffer the all-reduce sums in place, the host staging of its upload (a
// GPU only; else empty) and the Work. All empty when nothing is exchanged (cp 1, or the aux loss off).
struct BalanceExchange {
  Tensor sums;
  Tensor staging;
  std::shared_ptr<comm::Work> work;
};

// Posts the all-reduce over ctx.cp_comm of `routing`'s counts and tokens per sample (`samples` equal runs of
// tokens, sample-major). Non-blocking. Empty when ctx has no cp group of more than one rank or the aux loss is off.
BalanceExchange post_balance_exchange(const Routing& routing, std::int64_t samples, const RouterOptions& router,
                                      Context& ctx);

// The micro-batch's whole-sequence counts [E] and tokens, once the exchange posted by post_balance_exchange has
// completed (waits for it; timed as a cp wait, layers/comm_wait.hpp). `exchange` must not be empty.
struct SequenceBalance {
  std::vector<std::int64_t> counts;
  std::int64_t tokens = 0;
};
SequenceBalance finish_balance_exchange(const BalanceExchange& exchange, std::int64_t experts, Context& ctx);

}  // namespace cleave::layers
