// The memory plan's activations: each stage's backward block by block (stage_backward_memory, declared in
// memory_plan.hpp) and the walk over one pp rank's actions in schedule order that holds the stashes and the boundary
// tensors in flight. Invariant: bytes are per sample, one tp rank's, whole-sequence f32 (the cost model's units); the
// caller scales them by the micro-batch, the compute dtype and cp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan {

// The walk's units to bytes: per sample, whole-sequence f32 × the micro-batch, ÷ 2 under bf16, ÷ cp.
struct WalkScale {
  std::int64_t micro = 1;
  int dtype_divisor = 1, cp = 1;
  std::int64_t bytes(std::int64_t units) const { return units * micro / dtype_divisor / cp; }
};

// The peak, per sample, of the stashes and boundary tensors alive over pp rank `pp_rank`'s actions; stage_memory,
// stage_in and stage_out per stage (the rank's own filled in: its backward summary, the boundary tensor it receives
// and the one it sends, 0 at the model's ends). with_transients (bytes): the same walk holding each attention block's
// transient buffers inside it (StageBackwardMemory's *_transients), at least scale.bytes(stashes).
struct ActivationWalkPeaks {
  std::int64_t stashes = 0, with_transients = 0;
};
ActivationWalkPeaks activation_walk_peak(const Plan& plan, int pp_rank,
                                         const std::vector<StageBackwardMemory>& stage_memory,
                                         const std::vector<std::int64_t>& stage_in,
                                         const std::vector<std::int64_t>& stage_out, const WalkScale& scale);

}  // namespace cleave::run_plan
