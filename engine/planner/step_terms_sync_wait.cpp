// peer_sync_wait: what a rank waits at the meetings inside a block's passes for the time its peers lost (docs/planner.md,
// "Waits at meetings"), from the profile's measured wait per second of compute. Invariant: zero when the profile
// did not measure it or the block meets no peer inside a pass, so every other figure is then unchanged.
#include "engine/planner/step_terms.hpp"

namespace cleave::planner {

namespace {

bool meets(double exposed_s, double hidden_s) { return exposed_s > 0 || hidden_s > 0; }

// The last meeting of a pass names the term: ep's all-to-alls come after the attention's cp exchange and tp's
// all-reduces in a block.
StepTerm meeting_term(bool ep, bool cp) {
  return ep ? StepTerm::kExpertAllToAll : cp ? StepTerm::kContextParallel : StepTerm::kTensorParallel;
}

}  // namespace

SyncWait peer_sync_wait(const TermContext& c, const BlockCompute& compute, const BlockCollectives& tp,
                        const BlockCollectives& cp, const BlockCollectives& ep) {
  SyncWait w;
  const double per_compute = c.profile->measured.sync_wait_per_compute;
  if (per_compute <= 0) return w;
  const double rate = per_compute * c.core_sharing;
  const bool ep_f = meets(ep.forward_s, 0), cp_f = meets(cp.forward_s, cp.hidden_forward_s);
  if (ep_f || cp_f || meets(tp.forward_s, tp.hidden_forward_s)) {
    w.forward_term = meeting_term(ep_f, cp_f);
    w.forward_s = rate * compute.forward_s;
  }
  const bool ep_b = meets(ep.backward_s + ep.rerun_s, 0), cp_b = meets(cp.backward_s + cp.rerun_s, cp.hidden_backward_s);
  if (ep_b || cp_b || meets(tp.backward_s + tp.rerun_s, tp.hidden_backward_s)) {
    w.backward_term = meeting_term(ep_b, cp_b);
    w.backward_s = rate * (compute.backward_input_s() + (c.fused_backward ? compute.weight_grad_s : 0.0));
  }
  return w;
}

}  // namespace cleave::planner
