// Schedule value type: placement helpers and shape checks (see schedule.hpp).
#include "pipeline/schedule.hpp"

#include <algorithm>
#include <cstdint>

#include "engine/core/error.hpp"

namespace cleave::pipeline {

std::vector<int> Schedule::stages_of(int rank) const {
  std::vector<int> stages;
  for (int s = 0; s < static_cast<int>(stage_to_rank.size()); ++s) {
    if (stage_to_rank[s] == rank) stages.push_back(s);
  }
  return stages;
}

int Schedule::chunk_of(int stage) const {
  const int rank = rank_of(stage);
  int chunk = 0;
  for (int s = 0; s < stage; ++s) {
    if (stage_to_rank[s] == rank) ++chunk;
  }
  return chunk;
}

bool Schedule::is_lowered() const {
  for (const auto& actions : ranks) {
    for (const auto& action : actions) {
      if (!is_compute(action.kind)) return true;
    }
  }
  return false;
}

std::size_t Schedule::num_actions() const {
  std::size_t total = 0;
  for (const auto& actions : ranks) total += actions.size();
  return total;
}

Schedule make_empty_schedule(std::string name, int pp_size, int num_microbatches, int virtual_stages,
                             std::vector<int> stage_to_rank) {
  Schedule schedule;
  schedule.name = std::move(name);
  schedule.pp_size = pp_size;
  schedule.num_microbatches = num_microbatches;
  schedule.virtual_stages = virtual_stages;
  schedule.num_stages = pp_size * virtual_stages;
  schedule.stage_to_rank = std::move(stage_to_rank);
  schedule.ranks.assign(pp_size > 0 ? pp_size : 0, {});
  check_schedule_shape(schedule);
  return schedule;
}

void check_schedule_shape(const Schedule& s) {
  CLEAVE_CHECK(s.pp_size >= 1, "schedule '{}': pp_size must be at least 1, got {}", s.name, s.pp_size);
  CLEAVE_CHECK(s.num_microbatches >= 1, "schedule '{}': the number of micro-batches must be at least 1, got {}",
               s.name, s.num_microbatches);
  CLEAVE_CHECK(s.virtual_stages >= 1, "schedule '{}': virtual stages per rank must be at least 1, got {}", s.name,
               s.virtual_stages);
  const std::int64_t expected_stages = std::int64_t{s.pp_size} * s.virtual_stages;  // ints: no overflow in 64 bits
  CLEAVE_CHECK(s.num_stages == expected_stages, "schedule '{}': {} stages is not pp_size {} × virtual stages {} = {}",
               s.name, s.num_stages, s.pp_size, s.virtual_stages, expected_stages);
  CLEAVE_CHECK(static_cast<int>(s.stage_to_rank.size()) == s.num_stages,
               "schedule '{}': placement lists {} stages but the schedule has {}", s.name, s.stage_to_rank.size(),
               s.num_stages);
  std::vector<int> per_rank(s.pp_size, 0);
  for (int stage = 0; stage < s.num_stages; ++stage) {
    const int rank = s.stage_to_rank[stage];
    CLEAVE_CHECK(rank >= 0 && rank < s.pp_size, "schedule '{}': stage {} is placed on rank {}, expected 0..{}",
                 s.name, stage, rank, s.pp_size - 1);
    ++per_rank[rank];
  }
  for (int rank = 0; rank < s.pp_size; ++rank) {
    CLEAVE_CHECK(per_rank[rank] == s.virtual_stages,
                 "schedule '{}': rank {} holds {} stages but every rank must hold virtual_stages = {}", s.name, rank,
                 per_rank[rank], s.virtual_stages);
  }
  CLEAVE_CHECK(static_cast<int>(s.ranks.size()) == s.pp_size, "schedule '{}': {} rank lists for pp_size {}", s.name,
               s.ranks.size(), s.pp_size);
}

Schedule strip_to_compute(const Schedule& schedule) {
  Schedule out = schedule;
  for (auto& actions : out.ranks) {
    std::erase_if(actions, [](const Action& a) { return !is_compute(a.kind); });
  }
  return out;
}

}  // namespace cleave::pipeline
