// Gradient buckets reduced per micro-batch (optimizer.zero_reduce per_microbatch) under ZeRO-2 and ZeRO-3: the
// buckets as the runtime cuts them and the gradient peak over the rank's weight-gradient passes in schedule order.
// Invariant: a bucket is laid out as the bucketer lays it out (each parameter tensor from a 64-byte boundary, the
// bucket padded to 16 f32 elements, then to a multiple of dp) and is alive from
// the weight pass of its first writing block until the launch after its own (microbatch_peak).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/run_plan/plan.hpp"
#include "engine/run_plan/zero_units.hpp"

namespace cleave::run_plan {

// Per-micro-batch reduction (optimizer.zero_reduce per_microbatch, engine/comm/gradient_bucketer.hpp): the
// buckets as the runtime cuts them, each with the model blocks whose weight-gradient pass writes into it.
struct MicrobatchBuckets {
  std::vector<std::int64_t> numel;                 // f32 elements, laid out like the bucketer (16, then dp)
  std::vector<std::vector<int>> writes;             // per model block: the buckets its W writes
  std::vector<int> writers;                         // per bucket: reports of one micro-batch (blocks writing it)
  std::int64_t per_step = 0;                        // a tied table split over pp ranks: reduced once per step
  std::int64_t shards() const {
    std::int64_t sum = 0;
    for (std::int64_t n : numel) sum += n;
    return sum;
  }
};

// ZeRO-3: one bucket per unit (zero_three_buckets in microbatch_buckets.cpp).
MicrobatchBuckets zero_three_buckets(const ZeroThreeUnits& units, std::size_t blocks);

// ZeRO-2: each stage's blocks, last to first, packed whole up to parallel.dp_bucket_mb.
MicrobatchBuckets zero_two_buckets(const Plan& plan, int pp_rank, int tp, int dp, double bucket_mib, int ep);

// rank's weight-gradient passes (W or B) in schedule order, each stage's blocks last to first. Before a block
// writes, the buckets it writes are allocated if they are not; after it, a bucket with all its writers' reports
// of the micro-batch is launched: the bucket in flight before it is completed and freed first, then it is in
// flight (its f32 buffer; under a bf16 wire its bf16 copy instead, and completing it widens its block into a
// temporary shard). A tied table split over pp ranks is held in full through the step and its shard appears at
// the step's end (reduced once per step).
struct MicrobatchPeak {
  std::int64_t gradients = 0, wire = 0;
};

MicrobatchPeak microbatch_peak(const MicrobatchBuckets& m, const Plan& plan, int pp_rank, int dp, bool staged);

}  // namespace cleave::run_plan
