// The forward-only schedule that evaluation runs through the same Executor as training (docs/architecture.md: no second
// pipeline loop anywhere).
//
// Order on every rank: micro-batches in increasing order and, inside one, this rank's stages in increasing
// stage order; each F is preceded by RECV_F when its input comes from another rank and followed by SEND_F
// when its output goes to another rank. Deadlock-free: every rank lists the (micro-batch, stage) pairs in
// one global order that every dependency respects, receives are waited for only by the F that needs them,
// and sends never block (the executor waits for them at the end of the step).
#pragma once

#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

// Same placement (stage_to_rank) and micro-batch count as `training`, forward actions only.
Schedule forward_only_schedule(const Schedule& training);

}  // namespace cleave::pipeline
