// zero2_settle_wait_s: what ZeRO-2's per-micro-batch settle inside B waits for the time its peers lost computing that
// micro-batch, where the ranks outnumber the cores (docs/planner.md, "More ranks than cores", "the settle waits for
// the peers' backward"). Invariant: zero unless the bucket pricing applies (zero2_bucket_reduction), the passes meet
// no other peer (pp 1, no tp, cp or ep) and the profile measured sync_wait_per_compute; so every other plan, and
// every profile without both measurements, prices exactly as before.
#include "engine/planner/step_terms.hpp"

namespace cleave::planner {

double zero2_settle_wait_s(const TermContext& c, double microbatch_compute_s) {
  const double per_compute = c.profile->measured.sync_wait_per_compute;
  const PlanChoice& p = *c.choice;
  // The settle inside B exists only as the bucket pricing lays it out (ZeRO-2 per micro-batch, replicas, more
  // ranks than cores with time_sharing measured; one micro-batch streams the step); the passes' own meetings
  // (tp, cp, ep collectives, pipeline transfers) already wait for the compute they end.
  const bool settles = c.zero == 2 && c.per_microbatch && c.handoff_s > 0 && c.replicas > 1 && c.micro_batches > 1;
  const bool passes_meet_nobody = p.pp == 1 && p.tp == 1 && p.cp == 1 && p.ep == 1;
  if (!settles || !passes_meet_nobody || per_compute <= 0) return 0.0;
  // The meeting before it is the previous micro-batch's settle (the first micro-batch's: the step's gather after
  // the optimizer step), so it waits for one micro-batch's F and B, already at the core sharing.
  return per_compute * microbatch_compute_s;
}

}  // namespace cleave::planner
