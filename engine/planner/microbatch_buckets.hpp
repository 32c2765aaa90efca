// ZeRO-2's per-micro-batch gradient buckets as the engine lays them out, and what of each earlier micro-batch's
// reduction the backward cannot hide (docs/planner.md, "More ranks than cores", ZeRO-2 per micro-batch). The engine
// (engine/comm/gradient_bucketer.hpp, "Per micro-batch"; engine/train/data_parallel.cpp, bucket_specs) packs whole
// blocks of one stage in ready order (last block first) into buckets up to parallel.dp_bucket_mb, a tied table that
// two of the stage's blocks write alone and last (ready with the lowest block), and settles each bucket at the next
// bucket's launch. Invariant: pure functions of their arguments; the buckets' bytes sum to the blocks' and the table's;
// exposed + hidden = the sum of the per-bucket reductions.
#pragma once

#include <vector>

namespace cleave::planner {

// The buckets' bytes in launch order: `block_bytes` per block in forward order (the tied head, if any, left out),
// packed from the last block up to `cap_bytes` (a block larger than the cap alone), then `table_bytes` alone when > 0.
std::vector<double> microbatch_buckets(const std::vector<double>& block_bytes, double table_bytes, double cap_bytes);

// One earlier micro-batch's reduction, bucket by bucket: `reduce_s[j]` the seconds of bucket j's reduce-scatter
// (its handoffs included), `hide_s[j]` the compute between its launch and the next launch (what can hide it).
struct MicrobatchExposure {
  double exposed_s = 0, hidden_s = 0;
};
MicrobatchExposure microbatch_exposure(const std::vector<double>& reduce_s, const std::vector<double>& hide_s);

}  // namespace cleave::planner
