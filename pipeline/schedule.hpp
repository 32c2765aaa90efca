// Schedule: for each pp rank, the ordered list of actions it performs in one training step (docs/architecture.md).
//
// A schedule is data: generators (schedules/) produce it, lowering (lowering.hpp) adds communication,
// the validator checks it, the simulator times it, the executor interprets one rank's list, and the text
// form (schedule_text.hpp) saves and loads it. A *stage* is a model chunk, a *pp rank* a process; with v
// virtual stages per rank there are num_stages = pp_size · v stages and stage_to_rank says where each
// runs.
//
// Two forms: a compute schedule holds only F / I / W / B; a lowered schedule (is_lowered()) also holds
// SEND_* / RECV_* for every stage boundary that crosses ranks, one REDUCE_GRAD per stage and one
// OPTIMIZER_STEP closing every rank. Shape invariants are checked by check_schedule_shape(); ordering and
// completeness by the validator.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pipeline/action.hpp"

namespace cleave::pipeline {

struct Schedule {
  std::string name;                         // generator name or file it came from (informational)
  int pp_size = 1;                          // pipeline ranks
  int num_stages = 1;                       // = pp_size * virtual_stages
  int num_microbatches = 1;
  int virtual_stages = 1;                   // stages per rank
  std::vector<int> stage_to_rank;           // size num_stages
  std::vector<std::vector<Action>> ranks;   // size pp_size: ranks[r] is rank r's ordered action list
  // Overlapped F&B pairs (overlap_schedule.hpp; parallel.moe_a2a_overlap): an F directly followed by an I or B of
  // another stage on the same rank runs as one pair whose all-to-alls hide behind each other's compute. A
  // property the executor runs and the simulator times; set only by overlap_fb_pairs().
  bool overlap_fb_pairs = false;

  friend bool operator==(const Schedule&, const Schedule&) = default;  // every field, the action lists included

  int rank_of(int stage) const { return stage_to_rank.at(static_cast<std::size_t>(stage)); }
  // Stages held by `rank`, ascending; chunk_of(stage) is the stage's index in that list.
  std::vector<int> stages_of(int rank) const;
  int chunk_of(int stage) const;
  // True when the schedule holds any communication, REDUCE_GRAD or OPTIMIZER_STEP action.
  bool is_lowered() const;
  std::size_t num_actions() const;
};

// An empty schedule (no actions yet) with validated sizes and the given placement.
Schedule make_empty_schedule(std::string name, int pp_size, int num_microbatches, int virtual_stages,
                             std::vector<int> stage_to_rank);

// Checks sizes and placement: pp_size, num_microbatches, virtual_stages >= 1, num_stages = pp_size · v,
// every rank holds exactly v stages, ranks.size() == pp_size. Throws Error naming the numbers.
void check_schedule_shape(const Schedule& schedule);

// The compute schedule underneath a lowered one (drops communication, REDUCE_GRAD, OPTIMIZER_STEP).
Schedule strip_to_compute(const Schedule& schedule);

}  // namespace cleave::pipeline
