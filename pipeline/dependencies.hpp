// Data dependencies between schedule actions, an index of where each action sits, and the dry run.
//
// Dependencies (docs/architecture.md), for micro-batch j:
//   sFj      needs (s−1)Fj                       (stage 0 reads the data loader)
//   sIj, sBj need sFj and the input gradient of stage s+1: (s+1)Ij or (s+1)Bj  (the last stage: only sFj,
//            its loss is local)
//   sWj      needs sIj
// A lowered schedule carries cross-rank data only through SEND/RECV pairs: SEND_F(s, j) pairs with
// RECV_F(s+1, j) and SEND_B(s, j) with RECV_B(s−1, j).
//
// Dry run semantics (the validator's deadlock check; also the step grid and the lowering rounds):
//   - time advances in steps; in one step each rank runs at most its next action;
//   - a compute action runs once every action it needs ran in an earlier step (on any rank);
//   - a maximal run of consecutive SEND/RECV on one rank is a batch (one NCCL group): reaching its first
//     op posts all of its ops; an op completes, one per step, once its partner op is posted. Sends block
//     until the receiver posts (rendezvous), so this is the strictest model: a schedule that passes it
//     cannot deadlock when sends are buffered either;
//   - REDUCE_GRAD and OPTIMIZER_STEP are local and always ready.
// For a compute schedule with unit costs the step of each action is its start time.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/action.hpp"
#include "pipeline/schedule.hpp"

namespace cleave::pipeline {

// One thing a compute action needs first.
struct Need {
  enum class What { kForward, kInputGradient /* I or B */, kBackwardInput /* I only */ };
  What what = What::kForward;
  int stage = 0;
  int microbatch = 0;
};

// Needs of a compute action (empty for non-compute actions). Stages outside [0, num_stages) never appear.
std::vector<Need> compute_needs(const Action& action, int num_stages);
// "2F5", "2I5 / 2B5", "2I5" for messages.
std::string describe_need(const Need& need);

// SEND_F(s, j) <-> RECV_F(s+1, j); SEND_B(s, j) <-> RECV_B(s−1, j). Only for communication actions.
Action comm_partner(const Action& action);

struct Location {
  int rank = -1;
  int position = -1;
  bool found() const { return rank >= 0; }
};

// Where every action of a schedule sits. Actions with a stage or micro-batch out of range are skipped
// (the validator reports them). The first occurrence wins; later ones are listed in duplicates().
class ActionIndex {
 public:
  explicit ActionIndex(const Schedule& schedule);

  Location find(const Action& action) const;
  // The action that satisfies `need` (for kInputGradient: the I, else the B).
  Location find(const Need& need) const;
  // (first occurrence, repeated occurrence) pairs, in schedule order.
  const std::vector<std::pair<Location, Location>>& duplicates() const { return duplicates_; }

 private:
  // False for OPTIMIZER_STEP (one per rank, not indexed) and for out-of-range stages / micro-batches.
  bool indexed(const Action& action) const;

  int num_stages_ = 0;
  int num_microbatches_ = 0;
  std::map<Action, Location> where_;
  std::vector<std::pair<Location, Location>> duplicates_;
};

struct DryRun {
  std::vector<std::vector<int>> step;  // step[r][i]: step at which rank r ran its action i, -1 if it never did
  int num_steps = 0;                   // steps until the last action ran (or until progress stopped)
  bool finished = false;               // every action ran
  std::vector<int> stuck_at;           // per rank: position of its first action that never ran (= size if done)
  std::string stuck_reason;            // why the stuck ranks wait, one line ("" when finished)
};

DryRun dry_run(const Schedule& schedule, const ActionIndex& index);

}  // namespace cleave::pipeline
