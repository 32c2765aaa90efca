// Overlapped F&B pairs (overlap_schedule.hpp).
#include "pipeline/overlap_schedule.hpp"

#include <vector>

#include "engine/core/error.hpp"
#include "pipeline/validator.hpp"

namespace cleave::pipeline {
namespace {

bool pairs_with(const Action& f, const Action& b) {
  return f.kind == ActionKind::kForward && is_backward_input(b.kind) && b.stage != f.stage;
}

}  // namespace

bool starts_overlapped_pair(const Schedule& schedule, int rank, std::size_t i) {
  if (!schedule.overlap_fb_pairs) return false;
  const auto& actions = schedule.ranks.at(static_cast<std::size_t>(rank));
  return i + 1 < actions.size() && pairs_with(actions[i], actions[i + 1]);
}

int count_overlapped_pairs(const Schedule& schedule) {
  int pairs = 0;
  for (int r = 0; r < schedule.pp_size; ++r) {
    const auto& actions = schedule.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (starts_overlapped_pair(schedule, r, i)) {
        ++pairs;
        ++i;  // the partner is not the start of another pair
      }
    }
  }
  return pairs;
}

Schedule overlap_fb_pairs(const Schedule& lowered) {
  CLEAVE_CHECK(lowered.is_lowered() || lowered.pp_size == 1,
               "parallel.moe_a2a_overlap: schedule '{}' must be lowered before its F&B pairs are made adjacent",
               lowered.name);
  Schedule out = lowered;
  out.overlap_fb_pairs = true;
  for (auto& actions : out.ranks) {
    std::vector<Action> reordered;
    reordered.reserve(actions.size());
    std::size_t i = 0;
    while (i < actions.size()) {
      const Action& f = actions[i];
      std::size_t j = i + 1;
      while (j < actions.size() && is_communication(actions[j].kind)) ++j;
      if (f.kind != ActionKind::kForward || j >= actions.size() || !pairs_with(f, actions[j])) {
        reordered.push_back(f);
        ++i;
        continue;
      }
      const Action output_send{ActionKind::kSendF, f.stage, f.microbatch};
      std::vector<Action> after;
      for (std::size_t k = i + 1; k < j; ++k) {
        if (actions[k] == output_send) {
          after.push_back(actions[k]);
        } else {
          reordered.push_back(actions[k]);  // before the pair
        }
      }
      reordered.push_back(f);
      reordered.push_back(actions[j]);
      reordered.insert(reordered.end(), after.begin(), after.end());
      i = j + 1;
    }
    CLEAVE_ASSERT(reordered.size() == actions.size(), "overlap_fb_pairs lost actions ({} of {})", reordered.size(),
                  actions.size());
    actions = std::move(reordered);
  }
  const ValidationResult v = validate_schedule(out);
  CLEAVE_CHECK(v.ok, "parallel.moe_a2a_overlap: schedule '{}' with its F&B pairs made adjacent does not validate ({}); "
               "set parallel.moe_a2a_overlap false for this schedule", lowered.name, v.reason);
  return out;
}

}  // namespace cleave::pipeline
