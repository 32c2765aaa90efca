// Lowering (the round rule and its deadlock argument are in lowering.hpp).
#include "pipeline/lowering.hpp"

#include <algorithm>
#include <map>

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

}  // namespace

Schedule lower_schedule(const Schedule& in) {
  CLEAVE_CHECK(!in.is_lowered(),
               "schedule '{}' is already lowered (it has SEND/RECV, REDUCE_GRAD or OPTIMIZER_STEP actions); "
               "lowering takes a compute-only schedule",
               in.name);
  const ValidationResult validation = validate_schedule(in);
  if (!validation.ok) throw Error(validation.message(in.name));
  const DryRun& run = validation.run;
  const int p = in.pp_size;

  std::vector<std::map<int, Round>> rounds(p);
  for (int r = 0; r < p; ++r) {
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

  Schedule out = in;
  for (int r = 0; r < p; ++r) {
    const auto& computes = in.ranks[r];
    // Compute actions interleaved with the rounds' batches.
    std::vector<Action> with_comm;
    auto round = rounds[r].begin();
    for (int i = 0; i < static_cast<int>(computes.size()); ++i) {
      for (; round != rounds[r].end() && round->first < run.step[r][i]; ++round) emit(round->second, with_comm);
      with_comm.push_back(computes[i]);
    }
    for (; round != rounds[r].end(); ++round) emit(round->second, with_comm);

    // REDUCE_GRAD after each stage's last W/B and the batch that follows it.
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
    out.ranks[r] = std::move(final_list);
  }
  return out;
}

Schedule ensure_lowered(const Schedule& schedule) {
  if (!schedule.is_lowered()) return lower_schedule(schedule);
  check_schedule(schedule);
  return schedule;
}

}  // namespace cleave::pipeline
