// time_shared: what a layout with more ranks than cores pays beyond its share of the cores, from the profile's
// time_sharing measurement (docs/planner.md, "More ranks than cores"), and handoff_wait_s, a collective's handoffs
// at that price. Invariant: {1, 0, 1} and no handoff (nothing priced differently) unless the ranks outnumber the
// cores and the profile measured it.
#include <algorithm>

#include "engine/planner/step_terms.hpp"

namespace cleave::planner {

TimeShared time_shared(const HardwareProfile& profile, int ranks_on_node) {
  const auto& measured = profile.measured.time_sharing;
  if (!measured || profile.cores_per_node <= 0 || ranks_on_node <= profile.cores_per_node) return {};
  const double per_core = static_cast<double>(ranks_on_node) / profile.cores_per_node;
  const double k = static_cast<double>(measured->ranks_per_core);
  // The measured pair's excess over the ideal share (k times one core's time), toward it linearly from one rank per
  // core, whole from k ranks per core up.
  const double excess = std::max(0.0, measured->compute_ratio / k - 1.0);
  const double toward = std::min(1.0, (per_core - 1.0) / (k - 1.0));
  // A meeting's peer that is runnable but not running waits behind a rank that holds its core (computing) until that
  // rank's time slice ends: the spinning handoff, where the spinner holds the core as a computing rank does. The
  // yielding handoff is the case where the core's holder is itself waiting; which of the two a meeting meets is not
  // known, and the trials measured waits of the spinning kind (docs/planner.md, "More ranks than cores").
  return {1.0 + excess * toward, measured->handoff_spin_s, per_core, measured->handoff_s};
}

double handoff_wait_s(const TermContext& c, Exchange e, int ranks) {
  return c.handoff_s > 0 ? c.handoff_s * collective_handoffs(e, ranks, c.ranks_per_core) : 0.0;
}

}  // namespace cleave::planner
