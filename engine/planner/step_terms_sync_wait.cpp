// peer_sync_wait and point_to_point_sync_wait: what a rank waits at the meetings inside a block's passes, and a
// pipeline receiver at its transfers, for the time its peers lost (docs/planner.md, "Waits at meetings"), from the
// profile's measured wait per second of compute, and (more ranks than cores) for its core's holder
// (core_holder_wait_s); meeting_wait_s, the part every meeting waits whatever came before it.
// Invariant: zero when the profile did not measure it (and, for a transfer, the ranks do not outnumber the cores), or
// the block meets no peer inside a pass (no transfer to another rank), so every other figure is then unchanged.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

namespace cleave::planner {

namespace {

bool meets(double exposed_s, double hidden_s) { return exposed_s > 0 || hidden_s > 0; }

// The last meeting of a pass names the term: ep's all-to-alls come after the attention's cp exchange and tp's
// all-reduces in a block.
StepTerm meeting_term(bool ep, bool cp) {
  return ep ? StepTerm::kExpertAllToAll : cp ? StepTerm::kContextParallel : StepTerm::kTensorParallel;
}

}  // namespace

double meeting_wait_s(const TermContext& c, double meetings, double handoffs) {
  return c.profile->measured.sync_wait_per_meeting_s * meetings + c.handoff_s * handoffs;
}

double ep_meeting_wait_s(const TermContext& c, double meetings, double handoffs) {
  return c.profile->measured.sync_wait_per_meeting_s * meetings + c.ep_handoff_s * handoffs;
}

SyncWait peer_sync_wait(const TermContext& c, const BlockCompute& compute, const BlockCollectives& tp,
                        const BlockCollectives& cp, const BlockCollectives& ep, const CountExchange& counts) {
  SyncWait w;
  const double per_compute = c.profile->measured.sync_wait_per_compute;
  if (per_compute <= 0) return w;
  const double rate = per_compute * c.core_sharing;
  const bool ep_f = meets(ep.forward_s, 0), cp_f = meets(cp.forward_s, cp.hidden_forward_s);
  if (ep_f || cp_f || meets(tp.forward_s, tp.hidden_forward_s)) {
    w.forward_term = meeting_term(ep_f, cp_f);
    w.forward_s = std::max(0.0, rate * compute.forward_s - counts.wait_forward_s);
  }
  const bool ep_b = meets(ep.backward_s + ep.rerun_s, 0), cp_b = meets(cp.backward_s + cp.rerun_s, cp.hidden_backward_s);
  if (ep_b || cp_b || meets(tp.backward_s + tp.rerun_s, tp.hidden_backward_s)) {
    w.backward_term = meeting_term(ep_b, cp_b);
    w.backward_s = std::max(0.0, rate * (compute.backward_input_s() + (c.fused_backward ? compute.weight_grad_s : 0.0)) -
                                     counts.wait_rerun_s);
  }
  return w;
}

std::vector<SendWait> point_to_point_sync_wait(const TermContext& c, const std::vector<StageCosts>& stages) {
  std::vector<SendWait> waits(stages.size());
  const double rate = c.profile->measured.sync_wait_per_compute;
  if (c.choice->pp <= 1) return waits;
  // Where the ranks outnumber the cores, each transfer's receiver may also wait for its core's holder.
  const double holder = core_holder_wait_s(c.oversubscription, pipeline_mean_action_s(c, stages));
  if (rate <= 0 && c.handoff_s <= 0 && holder <= 0) return waits;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const double handoff = handoff_wait_s(c, Exchange::kPointToPoint, 2);  // each transfer a handoff too
    waits[s].forward_s = rate * pass_compute_s(stages[s].forward) + handoff + holder;
    const double w = c.fused_backward ? pass_compute_s(stages[s].weight_grad) : 0.0;  // a fused B sends after its W
    waits[s].backward_s = rate * (pass_compute_s(stages[s].input_grad) + w) + handoff + holder;
  }
  return waits;
}

}  // namespace cleave::planner
