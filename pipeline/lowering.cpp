// Lowering (the round rule and its deadlock argument are in lowering.hpp).
#include "pipeline/lowering.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "engine/core/error.hpp"
#include "pipeline/validator.hpp"

namespace cleave::pipeline {
namespace {

struct Round {
  std::vector<Action> sends;
  std::vector<Action> recvs;
};

bool comm_order(const Action& a, const Action& b) {
  if (a.stage != b.stage) return a.stage < b.stage;
  if (a.microbatch != b.microbatch) return a.microbatch < b.microbatch;
  return a.kind < b.kind;
}

void emit(const Round& round, std::vector<Action>& out) {
  std::vector<Action> sends = round.sends, recvs = round.recvs;
  std::sort(sends.begin(), sends.end(), comm_order);
  std::sort(recvs.begin(), recvs.end(), comm_order);
  out.insert(out.end(), sends.begin(), sends.end());
  out.insert(out.end(), recvs.begin(), recvs.end());
}

// Each rank's rounds by dry-run step: a forward whose next stage lives elsewhere sends its activation in the step
// it ran, and the next stage's rank receives it in the same round; a backward-input sends its gradient back alike.
std::vector<std::map<int, Round>> rounds_of(const Schedule& in, const DryRun& run) {
  std::vector<std::map<int, Round>> rounds(in.pp_size);
  for (int r = 0; r < in.pp_size; ++r) {
    for (int i = 0; i < static_cast<int>(in.ranks[r].size()); ++i) {
      const Action& a = in.ranks[r][i];
      const int k = run.step[r][i];
      CLEAVE_ASSERT(k >= 0, "validated schedule has an action that never ran in the dry run");
      if (a.kind == ActionKind::kForward && a.stage + 1 < in.num_stages && in.rank_of(a.stage + 1) != r) {
        rounds[r][k].sends.push_back({ActionKind::kSendF, a.stage, a.microbatch});
        rounds[in.rank_of(a.stage + 1)][k].recvs.push_back({ActionKind::kRecvF, a.stage + 1, a.microbatch});
      }
      if (is_backward_input(a.kind) && a.stage > 0 && in.rank_of(a.stage - 1) != r) {
        rounds[r][k].sends.push_back({ActionKind::kSendB, a.stage, a.microbatch});
        rounds[in.rank_of(a.stage - 1)][k].recvs.push_back({ActionKind::kRecvB, a.stage - 1, a.microbatch});
      }
    }
  }
  return rounds;
}

// One rank's compute actions (`steps`: their dry-run steps) interleaved with its rounds' batches: a round goes
// before the first compute action of a later step.
std::vector<Action> with_rounds(const std::vector<Action>& computes, const std::vector<int>& steps,
                                const std::map<int, Round>& rounds) {
  std::vector<Action> out;
  auto round = rounds.begin();
  for (int i = 0; i < static_cast<int>(computes.size()); ++i) {
    for (; round != rounds.end() && round->first < steps[i]; ++round) emit(round->second, out);
    out.push_back(computes[i]);
  }
  for (; round != rounds.end(); ++round) emit(round->second, out);
  return out;
}

// REDUCE_GRAD after each stage's last W/B and the batch that follows it, then OPTIMIZER_STEP.
std::vector<Action> with_grad_reductions(const std::vector<Action>& with_comm) {
  std::map<int, int> last_grad;  // stage -> index in with_comm
  for (int i = 0; i < static_cast<int>(with_comm.size()); ++i) {
    if (frees_stash(with_comm[i].kind)) last_grad[with_comm[i].stage] = i;
  }
  std::vector<Action> final_list;
  std::vector<int> pending;
  auto flush = [&] {
    for (int stage : pending) final_list.push_back({ActionKind::kReduceGrad, stage, -1});
    pending.clear();
  };
  for (int i = 0; i < static_cast<int>(with_comm.size()); ++i) {
    if (!is_communication(with_comm[i].kind)) flush();
    final_list.push_back(with_comm[i]);
    if (frees_stash(with_comm[i].kind) && last_grad[with_comm[i].stage] == i) pending.push_back(with_comm[i].stage);
  }
  flush();
  final_list.push_back({ActionKind::kOptimizerStep, -1, -1});
  return final_list;
}

}  // namespace

Schedule lower_schedule(const Schedule& in) {
  CLEAVE_CHECK(!in.is_lowered(),
               "schedule '{}' is already lowered (it has SEND/RECV, REDUCE_GRAD or OPTIMIZER_STEP actions); "
               "lowering takes a compute-only schedule",
               in.name);
  const ValidationResult validation = validate_schedule(in);
  if (!validation.ok) throw Error(validation.message(in.name));
  const DryRun& run = validation.run;
  const std::vector<std::map<int, Round>> rounds = rounds_of(in, run);
  Schedule out = in;
  for (int r = 0; r < in.pp_size; ++r) {
    out.ranks[r] = with_grad_reductions(with_rounds(in.ranks[r], run.step[r], rounds[r]));
  }
  return out;
}

Schedule ensure_lowered(const Schedule& schedule) {
  if (!schedule.is_lowered()) return lower_schedule(schedule);
  check_schedule(schedule);
  return schedule;
}

}  // namespace cleave::pipeline
