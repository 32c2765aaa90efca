// The per-step gradient buckets of ZeRO-0, 1 and 2 on one pp rank, and ZeRO-1/2's flat f32 parameter buffers and
// optimizer-state shards, which are laid out like them (engine/train/data_parallel_shards.cpp). Invariant: the
// layout is the bucketers' own (comm::lay_out_buckets, each tensor from a 64-byte boundary, each bucket padded to a
// multiple of the group when sharded), called on one tp rank's parameter tensors (partition/param_tensors.hpp) in
// the order DataParallel readies their gradients (engine/train/data_parallel.cpp).
#pragma once

#include <cstdint>

#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan {

struct FlatBuckets {
  std::int64_t total = 0;  // f32 elements of every bucket (the main one's, a split tied table's, the experts'), padded
  std::int64_t shard = 0;  // the elements of the largest dp rank's shards of them (dp rank 0's)
  std::int64_t expert_total = 0, expert_shard = 0;  // the experts' bucketer's part of each (ep > 1)
  // ZeRO-2 reduced per step over an f32 wire (comm::BucketReduction::kReduceScatterOwned): the most elements the
  // trades of a bucket for its shard add above the full buckets. A bucketer trades in bucket order (a shard is
  // allocated, then its bucket freed), so its trades add at most max over k of shard_k − Σ_{j<k}(bucket_j − shard_j):
  // shard 0 unless a later shard outweighs what the buckets before it freed (a lone large tensor after small
  // buckets). One trade runs at a time and a bucketer between trades has freed at least what it allocated, so with
  // several bucketers (a tied table split over pp ranks, the experts at ep > 1), whose trades interleave as their
  // collectives finish, the peak is the largest of theirs: exact for the main bucketer alone, else the worst order.
  std::int64_t trade_excess = 0;
};

// One tp rank's buckets on pp rank `pp_rank`: the main bucketer's over dp (dp × cp ranks), a tied table split over
// pp ranks in a bucketer of its own over dp, and at ep > 1 the rank's E / ep routed experts over dp / ep.
// `sharded`: ZeRO-1 and 2 (reduce-scattered: each bucket padded to a multiple of its group).
FlatBuckets flat_buckets(const Plan& plan, int pp_rank, int tp, int dp, int ep, double bucket_mib, bool sharded);

}  // namespace cleave::run_plan
