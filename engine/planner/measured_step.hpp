// A trained step term by term, beside the planner's prediction (`cleave plan --trial K --explain`; docs/planner.md,
// "Predicted against measured, term by term").
//
// The trainer's measured timeline (train.trace: trace.json, one step, every pp rank of replica 0, one clock) is
// read back into a pipeline::Timeline and one pp rank's step is attributed at the resolution a timeline has:
//   F spans -> forward, I -> input_grad, W -> weight_grad, B -> backward (I and W fused), REDUCE_GRAD ->
//   data_parallel, OPTIMIZER_STEP -> optimizer, SEND/RECV posting -> point_to_point;
//   an idle gap before a compute action that needed a peer's tensor (the rank holds its RECV): from the gap's start
//   until the peer posted the matching SEND -> bubble (the peer had not produced it), from then until the action
//   started -> point_to_point (the transfer, and the wait for it to be progressed); every other idle gap (before
//   the rank's first action, after its last, between local actions) -> bubble.
// The collectives that run inside a compute action (tp all-reduces, cp ring hops, ep all-to-alls, ZeRO-3 gathers)
// are inside its span; the trainer times how long the rank blocked on each kind there (layers/comm_wait.hpp; the
// trace's args wait_<kind>_us, TimedAction::comm_wait). Those waits are taken out of the span's row and make rows
// of their own (tp, cp, zero_gather, expert_all_to_all), set beside the planner's terms of that kind in F, I and W
// (tensor_parallel, context_parallel, zero_gather, expert_all_to_all), which leave the compute rows. So each row's
// prediction is the sum of the terms the planner prices into it (StepBreakdown::by_action), and the row names them.
// A trace without waits (an older trainer's) keeps the collectives inside the compute rows, as before.
// Invariant: a MeasuredStep's seconds sum to the timeline's makespan (earliest start to latest end over all ranks),
// as the predicted terms sum to the predicted step; the attribution reads no clock (a recorded timeline in, the
// same rows out). The split of idle time compares the sender's clock with the receiver's: one node only.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "engine/planner/step_breakdown.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::planner {

// One pp rank's measured step, in seconds.
struct MeasuredStep {
  std::array<double, kNumStepActions> actions{};  // F, I (and B), W, REDUCE_GRAD, OPTIMIZER_STEP spans
  // Blocked on collectives inside the F, I, W, B spans, per layers::CommKind (tp, cp, zero_gather,
  // expert_all_to_all): not in `actions`.
  std::array<double, pipeline::kNumCommWaitKinds> comm_wait_s{};
  double point_to_point_s = 0;  // posting SEND/RECV, and waiting for a tensor its peer had already sent
  double bubble_s = 0;          // the rest of the idle time
  double step_s = 0;            // the timeline's makespan
  bool fused_backward = false;  // the rank ran B actions (their time is in actions[kInputGrad])
  int rank = 0;                 // the pp rank attributed
  double total() const;
  double operator[](StepAction a) const { return actions[static_cast<std::size_t>(a)]; }
  bool has_comm_waits() const;  // any wait measured (the trace carried them)
};

// The Chrome trace the trainer writes (pipeline/trace.hpp: one process per pp rank, "cat" the action kind, "ts" and
// "dur" in µs; a compute span's args wait_<kind>_us, pipeline::comm_wait_arg) back as a Timeline in milliseconds. Throws Error naming `what` (the file) when it is not one.
pipeline::Timeline read_chrome_trace(std::string_view json_text, const std::string& what);

// Pp rank `rank`'s step of `timeline` (times in ms) attributed as in the file comment. Throws Error when the
// timeline has no such rank.
MeasuredStep measure_step(const pipeline::Timeline& timeline, int rank);

// Per field, the median over `steps` (rounds of one plan); {} when empty.
MeasuredStep median_step(const std::vector<MeasuredStep>& steps);

// One row of the comparison: a kind of action (or idle) with what the planner predicted in it and what was measured.
struct TermRow {
  std::string name;       // "forward", "backward" (a fused B), "data_parallel", "point_to_point", ...
  std::string predicted_terms;  // the planner's terms inside the row: "forward 0.673 + tensor_parallel 0.052"
  double predicted_s = 0, measured_s = 0;
};

// The rows (both figures 0 left out) and a last "total" row: the predicted step against the measured makespan.
std::vector<TermRow> compare_step(const StepBreakdown& predicted, const MeasuredStep& measured);

// The row (not "total") whose measurement is furthest from its prediction, in seconds; nullptr when there is none.
const TermRow* largest_disagreement(const std::vector<TermRow>& rows);

// The rows as a table (a header, a line per row: predicted ms, measured ms, pred/meas, the terms in it) and a last
// line naming the largest disagreement.
std::vector<std::string> comparison_table(const std::vector<TermRow>& rows);

}  // namespace cleave::planner
