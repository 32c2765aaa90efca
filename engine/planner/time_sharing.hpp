// What sharing a core costs a rank (`cleave profile`'s time_sharing, partition/measured_costs.hpp), measured at one
// rank per core: two of the profile's ranks are pinned to one core for a moment, as a layout with more ranks than
// cores puts them, and time (a) the same GEMM stream on every rank, on its own core and then on the shared one, and
// (b) a ping-pong between the two: each message is a handoff, the receiver runs only once the sender gives the core
// up. The waiter polls as the trainer's waits do when ranks outnumber cores (comm::PollBackoff yields between polls,
// Open MPI's mpi_yield_when_idle), and once more spinning without yielding (a descheduled peer then runs only when the
// spinner's time slice ends). The planner prices layouts with more ranks than cores from it (docs/planner.md, "More
// ranks than cores").
// Invariant: every rank of `comm` calls it; every rank's affinity is as it was on return; figures are >= 0.
#pragma once

#include <optional>

#include "engine/comm/communicator.hpp"

namespace cleave::planner {

struct TimeSharingMeasure {
  int ranks_per_core = 2;      // ranks on the shared core
  double compute_ratio = 0;    // a rank's GEMM stream on the shared core over the same on its own core (median)
  double handoff_s = 0;        // one message between the two, the waiter yielding between polls (median, half a trip)
  double handoff_spin_s = 0;   // the same, the waiter spinning (median, half a trip)
};

// Ranks 0 and 1 share rank 0's first allowed core (sched_setaffinity of the calling thread: run it with one compute
// thread per rank); the other ranks wait. Five rounds of a 384-GEMM stream (128³ f32, about 30 ms on one core) on
// own cores then on the shared one, `trips` yielding round trips and trips / 10 spinning ones (at most half a second).
// nullopt where the ranks cannot be pinned (not Linux, a cpuset without the core): nothing is measured then.
std::optional<TimeSharingMeasure> measure_time_sharing(comm::Communicator& comm, int trips = 200);

}  // namespace cleave::planner
