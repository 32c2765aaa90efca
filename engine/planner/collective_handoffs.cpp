// collective_handoffs.hpp: the handoffs of one collective from its phases and the peers each phase waits for.
// Invariant: as the header's.
#include "engine/planner/collective_handoffs.hpp"

namespace cleave::planner {

int exchange_phases(Exchange e) { return e == Exchange::kAllReduce ? 2 : 1; }

double handoffs_per_phase(int ranks, double ranks_per_core) {
  if (ranks < 2 || ranks_per_core <= 1) return 0.0;
  return 1.0 + (ranks - 2) * (1.0 - 1.0 / ranks_per_core);
}

double collective_handoffs(Exchange e, int ranks, double ranks_per_core) {
  const int peers = e == Exchange::kPointToPoint ? 2 : ranks;
  return exchange_phases(e) * handoffs_per_phase(peers, ranks_per_core);
}

}  // namespace cleave::planner
