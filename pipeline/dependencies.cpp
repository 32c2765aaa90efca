// Dependencies, action index and dry run (semantics in dependencies.hpp).
#include "pipeline/dependencies.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/core/error.hpp"

namespace cleave::pipeline {
std::vector<Need> compute_needs(const Action& action, int num_stages) {
  const int s = action.stage, j = action.microbatch;
  std::vector<Need> needs;
  switch (action.kind) {
    case ActionKind::kForward:
      if (s > 0) needs.push_back({Need::What::kForward, s - 1, j});
      break;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward:
      needs.push_back({Need::What::kForward, s, j});
      if (s + 1 < num_stages) needs.push_back({Need::What::kInputGradient, s + 1, j});
      break;
    case ActionKind::kBackwardWeight:
      needs.push_back({Need::What::kBackwardInput, s, j});
      break;
    default:
      break;
  }
  return needs;
}

std::string describe_need(const Need& need) {
  switch (need.what) {
    case Need::What::kForward:
      return format_action({ActionKind::kForward, need.stage, need.microbatch});
    case Need::What::kBackwardInput:
      return format_action({ActionKind::kBackwardInput, need.stage, need.microbatch});
    case Need::What::kInputGradient:
      return fmt::format("{} or {}", format_action({ActionKind::kBackwardInput, need.stage, need.microbatch}),
                         format_action({ActionKind::kBackward, need.stage, need.microbatch}));
  }
  return {};
}

Action comm_partner(const Action& action) {
  switch (action.kind) {
    case ActionKind::kSendF:
      return {ActionKind::kRecvF, action.stage + 1, action.microbatch};
    case ActionKind::kRecvF:
      return {ActionKind::kSendF, action.stage - 1, action.microbatch};
    case ActionKind::kSendB:
      return {ActionKind::kRecvB, action.stage - 1, action.microbatch};
    case ActionKind::kRecvB:
      return {ActionKind::kSendB, action.stage + 1, action.microbatch};
    default:
      CLEAVE_ASSERT(false, "comm_partner of non-communication action {}", format_action(action));
      return action;
  }
}

ActionIndex::ActionIndex(const Schedule& schedule)
    : num_stages_(schedule.num_stages), num_microbatches_(schedule.num_microbatches) {
  for (int r = 0; r < static_cast<int>(schedule.ranks.size()); ++r) {
    const auto& actions = schedule.ranks[r];
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      if (!indexed(actions[i])) continue;
      const auto [it, inserted] = where_.try_emplace(actions[i], Location{r, i});
      if (!inserted) duplicates_.push_back({it->second, Location{r, i}});
    }
  }
}

bool ActionIndex::indexed(const Action& action) const {
  if (action.kind == ActionKind::kOptimizerStep) return false;
  if (action.stage < 0 || action.stage >= num_stages_) return false;
  return !has_microbatch(action.kind) || (action.microbatch >= 0 && action.microbatch < num_microbatches_);
}

Location ActionIndex::find(const Action& action) const {
  if (!indexed(action)) return {};
  const auto it = where_.find(action);
  return it == where_.end() ? Location{} : it->second;
}

Location ActionIndex::find(const Need& need) const {
  switch (need.what) {
    case Need::What::kForward:
      return find(Action{ActionKind::kForward, need.stage, need.microbatch});
    case Need::What::kBackwardInput:
      return find(Action{ActionKind::kBackwardInput, need.stage, need.microbatch});
    case Need::What::kInputGradient: {
      const Location input = find(Action{ActionKind::kBackwardInput, need.stage, need.microbatch});
      return input.found() ? input : find(Action{ActionKind::kBackward, need.stage, need.microbatch});
    }
  }
  return {};
}

namespace {

// Per rank, for each SEND/RECV the position one past the end of its batch (the run of communication actions it
// stands in); -1 for compute.
std::vector<std::vector<int>> batch_ends(const Schedule& schedule) {
  std::vector<std::vector<int>> batch_end(schedule.ranks.size());
  for (std::size_t r = 0; r < schedule.ranks.size(); ++r) {
    const auto& actions = schedule.ranks[r];
    const int n = static_cast<int>(actions.size());
    batch_end[r].assign(n, -1);
    for (int i = n - 1; i >= 0; --i) {
      if (!is_communication(actions[i].kind)) continue;
      batch_end[r][i] = (i + 1 < n && is_communication(actions[i + 1].kind)) ? batch_end[r][i + 1] : i + 1;
    }
  }
  return batch_end;
}

// Whether the action at `where` ran at a step before t.
bool ran_before(const DryRun& run, Location where, int t) {
  return where.found() && run.step[where.rank][where.position] >= 0 && run.step[where.rank][where.position] < t;
}

// Why the ranks of a stuck dry run wait (at step t, each at run.stuck_at): the first input a compute action lacks,
// or the partner a SEND/RECV waits to be posted.
std::string stuck_reason(const Schedule& schedule, const ActionIndex& index, const DryRun& run, int t) {
  std::string reason;
  for (int r = 0; r < static_cast<int>(schedule.ranks.size()); ++r) {
    const auto& actions = schedule.ranks[r];
    if (run.stuck_at[r] >= static_cast<int>(actions.size())) continue;
    const Action& a = actions[run.stuck_at[r]];
    std::string why;
    if (is_compute(a.kind)) {
      for (const auto& need : compute_needs(a, schedule.num_stages)) {
        const Location where = index.find(need);
        if (ran_before(run, where, t)) continue;
        why = where.found() ? fmt::format("for {} (rank {}, not run yet)", describe_need(need), where.rank)
                            : fmt::format("for {}, which is not in the schedule", describe_need(need));
        break;
      }
    } else if (is_communication(a.kind)) {
      const Action partner = comm_partner(a);
      const Location where = index.find(partner);
      why = where.found() ? fmt::format("for {} on rank {} to be posted", format_action(partner), where.rank)
                          : fmt::format("for {}, which is not in the schedule", format_action(partner));
    }
    if (!reason.empty()) reason += "; ";
    reason += fmt::format("rank {} waits at {} {}", r, format_action(a), why);
  }
  return reason;
}

}  // namespace

DryRun dry_run(const Schedule& schedule, const ActionIndex& index) {
  const int p = static_cast<int>(schedule.ranks.size());
  DryRun run;
  run.step.resize(p);
  std::vector<std::vector<int>> posted(p);  // step at which a communication op was posted, -1 if not yet
  const std::vector<std::vector<int>> batch_end = batch_ends(schedule);
  for (int r = 0; r < p; ++r) {
    run.step[r].assign(schedule.ranks[r].size(), -1);
    posted[r].assign(schedule.ranks[r].size(), -1);
  }
  std::vector<int> next(p, 0);
  auto all_done = [&] {
    for (int r = 0; r < p; ++r) {
      if (next[r] < static_cast<int>(schedule.ranks[r].size())) return false;
    }
    return true;
  };

  int t = 0;
  while (!all_done()) {
    // Reaching a batch posts every op in it.
    for (int r = 0; r < p; ++r) {
      const auto& actions = schedule.ranks[r];
      const int i = next[r];
      if (i < static_cast<int>(actions.size()) && is_communication(actions[i].kind) && posted[r][i] < 0) {
        for (int k = i; k < batch_end[r][i]; ++k) posted[r][k] = t;
      }
    }
    std::vector<int> runs;
    for (int r = 0; r < p; ++r) {
      const auto& actions = schedule.ranks[r];
      const int i = next[r];
      if (i >= static_cast<int>(actions.size())) continue;
      const Action& a = actions[i];
      bool ready = true;
      if (is_compute(a.kind)) {
        for (const auto& need : compute_needs(a, schedule.num_stages)) {
          if (!ran_before(run, index.find(need), t)) ready = false;
        }
      } else if (is_communication(a.kind)) {
        const Location partner = index.find(comm_partner(a));
        ready = partner.found() && posted[partner.rank][partner.position] >= 0;
      }
      if (ready) runs.push_back(r);
    }
    if (runs.empty()) break;
    for (int r : runs) run.step[r][next[r]++] = t;
    ++t;
  }
  run.num_steps = t;
  run.finished = all_done();
  run.stuck_at = next;
  if (!run.finished) run.stuck_reason = stuck_reason(schedule, index, run, t);
  return run;
}

}  // namespace cleave::pipeline
