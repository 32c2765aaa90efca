// Text form of a schedule (docs/architecture.md), so schedules can be saved, diffed, hand-written and named by
// `parallel.schedule` / `cleave simulate --schedule FILE`.
//
//   # comments run from '#' to the end of a line; blank lines are ignored
//   name: 1f1b                    optional header lines "key: value"
//   pp_size: 2
//   num_stages: 2
//   num_microbatches: 2
//   virtual_stages: 1
//   placement: 0 1                stage → rank, one number per stage
//   overlap_fb_pairs: true        Schedule::overlap_fb_pairs (overlap_schedule.hpp); written only when set
//   rank 0: 0F0 0F1 0B0 0B1       one line per pp rank, one action token per word (action.hpp)
//   rank 1: 1F0 1B0 1F1 1B1
//
// Every header line may be left out: pp_size is the number of rank lines, num_stages and
// num_microbatches are one more than the largest stage and micro-batch used, placement is where each
// stage appears, virtual_stages = num_stages / pp_size, overlap_fb_pairs is false. Parsing checks syntax
// and shape only; the validator checks that the schedule runs. Errors name the source, line and token. A
// loaded schedule with overlap_fb_pairs set runs its F&B pairs overlapped once lowered (the plan and
// `cleave simulate` make them adjacent again, overlap_schedule.hpp).
#pragma once

#include <string>
#include <string_view>

#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

std::string format_schedule(const Schedule& schedule);
// `source` names the text in errors (a path or "<string>").
Schedule parse_schedule(std::string_view text, std::string_view source = "<string>");

// Throw Error naming the path when it cannot be written / read.
void save_schedule(const Schedule& schedule, const std::string& path);
Schedule load_schedule(const std::string& path);

}  // namespace cleave::pipeline
