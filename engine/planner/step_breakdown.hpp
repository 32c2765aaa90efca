// Where a plan's predicted step goes, term by term (docs/planner.md, "The step, term by term").
//
// Every action the simulator times is priced as a sum of terms (ActionTerms: forward compute, tensor-parallel
// collectives, ...); the breakdown walks the busiest pp rank's actions and adds up their terms, then splits the
// rank's idle time into point-to-point waits and bubble. Invariant: the terms of StepBreakdown::seconds sum to
// the predicted step (PlanEstimate::step_s) up to rounding; StepBreakdown::hidden holds what overlapped with
// compute and is therefore in no term of the sum.
//
// Adding a term (as kExpertAllToAll was): an enumerator before kCount with its row in
// kStepTermInfo, a function in step_terms.hpp that prices it into the ActionTerms of the actions that wait for it,
// and its formula in docs/planner.md. Nothing else changes: the simulator reads ActionTerms::total(), and
// `--explain` prints every term.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace cleave::planner {

enum class StepTerm {
  kForward,          // F compute of the blocks (per block and pass: StepBreakdown::blocks)
  kInputGrad,        // I compute, without the recomputed forward
  kWeightGrad,       // W compute
  kRecompute,        // the forward rerun inside I (train.recompute); its collectives are in their own terms
  kElementwise,      // memory-bound elementwise, normalisation and softmax traffic of F, I, W and the rerun (roofline)
  kKernelLaunch,     // kernels launched in F, I, W and the rerun x the profile's launch cost (roofline)
  kTensorParallel,   // tp all-reduces, or sequence parallelism's reduce-scatter + all-gather; boundary all-gathers
  kContextParallel,  // cp's key/value exchange, what compute does not hide
  kExpertAllToAll,   // ep's four all-to-alls per moe block and micro-batch (dispatch, combine, their gradients)
  kCountExchange,    // ep's exchange of routed-row counts before each dispatch, and the wait at that meeting
  kZeroGather,       // ZeRO-3 parameter gathers the prefetch does not hide; ZeRO-1/2 gather after the step
  kDataParallel,     // the gradients' reduction over dp x cp replicas (REDUCE_GRAD; per-micro-batch ZeRO behind W)
  kOptimizer,        // the optimizer step
  kPointToPoint,     // idle: what the pipeline's boundary transfers add to the step
  kPointToPointWait, // idle: what a receiver waits at a transfer for the time its sender lost (a two-rank meeting)
  kBubble,           // idle: the rest (waiting for the stages before and after)
  kCount
};
constexpr int kNumStepTerms = static_cast<int>(StepTerm::kCount);

struct StepTermInfo {
  std::string_view name;         // "forward", ... (JSON key, --explain row)
  std::string_view description;  // what --explain prints beside it
};
const StepTermInfo& step_term_info(StepTerm term);

using TermSeconds = std::array<double, kNumStepTerms>;

// The kinds of action a measured timeline times apart (engine/planner/measured_step.hpp compares a trained step
// with the prediction on these): F, I, W, REDUCE_GRAD, OPTIMIZER_STEP. A fused B counts in both I and W.
enum class StepAction { kForward, kInputGrad, kWeightGrad, kReduceGrad, kOptimizer, kCount };
constexpr int kNumStepActions = static_cast<int>(StepAction::kCount);

// One action's cost (one micro-batch's F, I or W of a stage, or a REDUCE_GRAD or OPTIMIZER_STEP): `exposed` is
// what the simulator times (its total), `hidden` what ran under it and costs nothing.
struct ActionTerms {
  TermSeconds exposed{};
  TermSeconds hidden{};
  double& operator[](StepTerm t) { return exposed[static_cast<std::size_t>(t)]; }
  double operator[](StepTerm t) const { return exposed[static_cast<std::size_t>(t)]; }
  double& hidden_at(StepTerm t) { return hidden[static_cast<std::size_t>(t)]; }
  double total() const;
  ActionTerms& operator+=(const ActionTerms& o);
};

// Compute of one block kind in one pass on the busiest rank, over the step.
struct BlockPassSeconds {
  std::string block;  // the block kind ("transformer_block")
  int blocks = 0;     // blocks of that kind on the rank
  double forward_s = 0, input_grad_s = 0, weight_grad_s = 0, recompute_s = 0;  // the forward, ..., recompute terms
  // Its elementwise and kernel_launch terms by pass: F, I, W and the rerun inside I (kPassF ... kPassRerun).
  std::array<double, 4> elementwise_s{}, launch_s{};
  double elementwise_total() const { return elementwise_s[0] + elementwise_s[1] + elementwise_s[2] + elementwise_s[3]; }
  double launch_total() const { return launch_s[0] + launch_s[1] + launch_s[2] + launch_s[3]; }
};
enum BlockPass : std::size_t { kPassF = 0, kPassI = 1, kPassW = 2, kPassRerun = 3 };
// Adds `b`'s seconds to the entry of its block kind in `into` (appended, with blocks 0, when the kind is new).
void add_block_seconds(std::vector<BlockPassSeconds>& into, const BlockPassSeconds& b);

struct StepBreakdown {
  TermSeconds seconds{};  // per step on the busiest pp rank; sums to the step
  TermSeconds hidden{};   // overlapped with compute (not in the sum): ZeRO-3 prefetch, ring hops, early reductions
  int rank = 0;           // the busiest pp rank (most busy time)
  // Its compute by block kind; sums to forward + input_grad + weight_grad + recompute + elementwise + kernel_launch.
  std::vector<BlockPassSeconds> blocks;
  // The same busy terms by the kind of action they are spent in (tp all-reduces inside F and I, ...); summed over
  // the kinds they are `seconds` without point_to_point and bubble.
  std::array<TermSeconds, kNumStepActions> by_action{};
  // The five coarse groups earlier tools printed: compute (F, I, W, recomputation, elementwise, launches), tp (and
  // cp, ep, the count exchange) collectives, idle (P2P, its waits and bubble), dp reduction (and ZeRO's gathers),
  // optimizer. Sums of `seconds`, set by set_groups().
  double compute_s = 0, tp_comm_s = 0, idle_s = 0, dp_comm_s = 0, optimizer_s = 0;

  double operator[](StepTerm t) const { return seconds[static_cast<std::size_t>(t)]; }
  double total() const;
  void set_groups();
  void add_action(StepAction kind, const ActionTerms& terms);  // by_action[kind] += terms.exposed
};

// The breakdown as a table: a header, one line per term (`all` false: terms and hidden time both 0 left out) with
// its milliseconds per step, share of the step, what it is and any hidden time, the compute terms' block kinds
// indented under them ("    transformer_block   0.217  20.0%  2 on the rank"), and the total last.
std::vector<std::string> breakdown_table(const StepBreakdown& b, bool all = false);

}  // namespace cleave::planner
