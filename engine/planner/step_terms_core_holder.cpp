// core_holder_wait_s and pipeline_mean_action_s: where a plan's ranks outnumber the node's cores, what a pipeline
// transfer's receiver waits for the rank that holds the core it needs (docs/planner.md, "More ranks than cores", the
// pipeline's transfers). The mechanism: ranks that wait for a transfer give their core up (the trainer's polls yield,
// comm::PollBackoff), so a core passes from rank to rank at the ends of actions, not in even slices; a receiver whose
// tensor arrives is not running with probability 1 - 1/ρ (ρ = ranks per core, the same rule as a collective's peers,
// collective_handoffs.hpp), and then waits for the core's holder to end the action it is in: half an action on
// average, the holder's action as it runs on a whole core (the priced compute over the ranks' share of the cores).
// Which rank holds the core is not known; the pipeline's mean action stands for it.
// ep_core_holder_wait_s and add_ep_core_holder_waits extend the rule to expert parallelism's meetings: a rank at an
// all-to-all or count exchange needs every peer on a core (a pair's bytes move only while both ranks run: Open MPI's
// copy-in/copy-out shared memory copies on both ranks' cores), and each peer waits for its core's holder in the same
// way, that holder computing until its own next meeting.
// peer_core_holder_wait_s and add_group_core_holder_waits take the same rule to tensor and context parallelism's
// meetings (each tp collective, cp all-to-all or ring hop waits for each of its peers' core holders in turn).
// Invariant: zero unless the ranks outnumber the profile's known cores (TermContext::oversubscription > 1) and the
// plan has a pipeline (transfers), ep > 1 (ep's meetings), or tp or cp > 1 (theirs): every other plan, and every GPU
// profile (a device per rank), prices exactly as before.
#include <numeric>

#include "engine/planner/step_terms.hpp"

namespace cleave::planner {

double pass_compute_s(const ActionTerms& a) {
  using T = StepTerm;
  return a[T::kForward] + a[T::kInputGrad] + a[T::kWeightGrad] + a[T::kRecompute] + a[T::kElementwise] +
         a[T::kKernelLaunch];
}

double core_holder_wait_s(double ranks_per_core, double holder_action_s) {
  if (ranks_per_core <= 1 || holder_action_s <= 0) return 0.0;
  return (1.0 - 1.0 / ranks_per_core) * holder_action_s / 2.0;
}

namespace {

// The stages' compute per micro-batch on a whole core: priced at the ranks' share of the cores (core_sharing holds it
// with the stretch), so over that share, the stretch kept.
double whole_core_compute_s(const TermContext& c, const std::vector<StageCosts>& stages) {
  double compute = 0;
  for (const StageCosts& s : stages) {
    compute += pass_compute_s(s.forward) + pass_compute_s(s.input_grad) + pass_compute_s(s.weight_grad);
  }
  const double shared = c.core_sharing / c.compute_stretch;
  return compute / (shared > 0 ? shared : 1.0);
}

// Per micro-batch a stage runs F, I and W, or F and a fused B (I and W together).
double actions_per_stage(const TermContext& c) { return c.fused_backward ? 2.0 : 3.0; }

}  // namespace

double pipeline_mean_action_s(const TermContext& c, const std::vector<StageCosts>& stages) {
  if (stages.empty()) return 0.0;
  return whole_core_compute_s(c, stages) / (static_cast<double>(stages.size()) * actions_per_stage(c));
}

double peer_core_holder_wait_s(const TermContext& c, const std::vector<StageCosts>& stages) {
  if (c.oversubscription <= 1) return 0.0;
  // A computing rank gives its core up at its next meeting, or (a pipeline) at the end of its action.
  double yields = 0;
  for (const StageCosts& s : stages) yields += s.meetings + (c.choice->pp > 1 ? actions_per_stage(c) : 0.0);
  if (yields <= 0) return 0.0;
  const double action = whole_core_compute_s(c, stages) / yields;
  return core_holder_wait_s(c.oversubscription, action);
}

double ep_core_holder_wait_s(const TermContext& c, const std::vector<StageCosts>& stages) {
  if (c.oversubscription <= 1 || c.choice->ep <= 1) return 0.0;
  return (c.choice->ep - 1) * peer_core_holder_wait_s(c, stages);
}

void add_group_core_holder_waits(const TermContext& c, std::vector<StageCosts>& stages) {
  if (c.choice->tp <= 1 && c.choice->cp <= 1) return;
  const double each = peer_core_holder_wait_s(c, stages);
  if (each <= 0) return;
  using T = StepTerm;
  for (StageCosts& s : stages) {
    const GroupPeers& g = s.group_peers;
    s.forward[T::kTensorParallel] += each * g.tp_forward;
    s.input_grad[T::kTensorParallel] += each * g.tp_backward;
    s.forward[T::kContextParallel] += each * g.cp_forward;
    s.input_grad[T::kContextParallel] += each * g.cp_backward;
  }
}

void add_ep_core_holder_waits(const TermContext& c, std::vector<StageCosts>& stages) {
  const double each = ep_core_holder_wait_s(c, stages);
  if (each <= 0) return;
  using T = StepTerm;
  for (StageCosts& s : stages) {
    const EpMeetings& m = s.ep_meetings;
    s.forward[T::kExpertAllToAll] += each * m.all_to_alls_forward;
    s.input_grad[T::kExpertAllToAll] += each * m.all_to_alls_backward;
    s.forward[T::kCountExchange] += each * m.counts_forward;
    s.input_grad[T::kCountExchange] += each * m.counts_backward;
    if (s.ep_exchange.all_to_all_s <= 0 || m.blocks <= 0) continue;
    // ep_exchange is one block's: the stage's meetings over its moe blocks.
    s.ep_exchange.meetings_s += each * (m.all_to_alls_forward + m.all_to_alls_backward) / m.blocks;
    s.ep_exchange.count_exchange_s += each * (m.counts_forward + m.counts_backward) / m.blocks;
  }
}

}  // namespace cleave::planner
