// core_holder_wait_s and pipeline_mean_action_s: where a plan's ranks outnumber the node's cores, what a pipeline
// transfer's receiver waits for the rank that holds the core it needs (docs/planner.md, "More ranks than cores", the
// pipeline's transfers). The mechanism: ranks that wait for a transfer give their core up (the trainer's polls yield,
// comm::PollBackoff), so a core passes from rank to rank at the ends of actions, not in even slices; a receiver whose
// tensor arrives is not running with probability 1 - 1/ρ (ρ = ranks per core, the same rule as a collective's peers,
// collective_handoffs.hpp), and then waits for the core's holder to end the action it is in: half an action on
// average, the holder's action as it runs on a whole core (the priced compute over the ranks' share of the cores).
// Which rank holds the core is not known; the pipeline's mean action stands for it.
// Invariant: zero unless the ranks outnumber the profile's known cores (TermContext::oversubscription > 1) and the
// plan has a pipeline: every other plan, and every GPU profile (a device per rank), prices exactly as before.
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

double pipeline_mean_action_s(const TermContext& c, const std::vector<StageCosts>& stages) {
  if (stages.empty()) return 0.0;
  double compute = 0;
  for (const StageCosts& s : stages) {
    compute += pass_compute_s(s.forward) + pass_compute_s(s.input_grad) + pass_compute_s(s.weight_grad);
  }
  // Per micro-batch a stage runs F, I and W, or F and a fused B (I and W together).
  const double actions = static_cast<double>(stages.size()) * (c.fused_backward ? 2.0 : 3.0);
  // Priced at the ranks' share of the cores (core_sharing holds it with the stretch); on a whole core, the stretch kept.
  const double shared = c.core_sharing / c.compute_stretch;
  return compute / actions / (shared > 0 ? shared : 1.0);
}

}  // namespace cleave::planner
