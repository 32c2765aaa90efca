// Overlapped F&B pairs (parallel.moe_a2a_overlap; issue 36 part 6): DeepSeek's DualPipe runs the forward of one
// micro-batch together with the backward of another chunk, so that one pass's MoE all-to-all is in flight while the
// other computes. Here that is a schedule property (Schedule::overlap_fb_pairs): in such a schedule every F that is
// directly followed on its rank by an I or B of another stage forms a pair, which the executor runs interleaved
// (overlap_pair.hpp: the two sides hand the rank to each other at each all-to-all) and the simulator times with
// each side's all-to-all hidden behind the other's compute (simulator.hpp).
//
// overlap_fb_pairs(lowered) makes the pairs adjacent: where an F and the next compute action, an I or B of another
// stage, have only communication between them, the SEND of that F's output moves after the pair (it can leave only
// once F is done) and every other communication action moves before the F (receives are posted earlier, sends of
// earlier work leave earlier). Nothing else moves. The result is validated (validator.hpp: dependencies, matching
// posting order, a deadlock-free dry run); a schedule that does not validate is an error naming it.
//
// Invariant: every (stage, micro-batch)'s own actions keep their relative order and every pair's two inputs are
// there before the pair starts (the executor takes both first), so the pair's sides depend on nothing the other
// produces: results equal the unpaired run's bit for bit.
#pragma once

#include <cstddef>

#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

// Whether rank `rank`'s action `i` is the F of an overlapped pair in `schedule` (its partner is action i + 1).
bool starts_overlapped_pair(const Schedule& schedule, int rank, std::size_t i);

// The pairs counted over all ranks (0 when the schedule is not overlapped).
int count_overlapped_pairs(const Schedule& schedule);

// `lowered` with its F&B pairs made adjacent and overlap_fb_pairs set (see the header). Throws Error when the
// schedule is not lowered or the reordered schedule does not validate.
Schedule overlap_fb_pairs(const Schedule& lowered);

}  // namespace cleave::pipeline
