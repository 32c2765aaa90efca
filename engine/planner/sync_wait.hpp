// The wait at a synchronization point, per second of compute before it (`cleave profile`'s sync_wait_per_compute,
// partition/measured_costs.hpp): what a rank loses when it must meet its peers inside a pass (an expert all-to-all,
// a ring hop, a tp all-reduce) beyond the collective's own time. Ranks that run the same work arrive together only
// when nothing takes their cores; on a machine shared with other work (or a rank's own progress thread, or noise)
// each rank loses time slices at random moments, and at every meeting each rank waits for what its peers lost
// since the last one. The loss grows with the compute between meetings, so it is measured per second of it.
// Invariant: every rank of `comm` takes part in the same sequence of collectives; the result is >= 0.
#pragma once

#include "engine/comm/communicator.hpp"

namespace cleave::planner {

// The same lost time seen from the compute: `cleave profile` takes a block's time as the median of its runs, which
// leaves out the runs a lost time slice hit, while a training step pays every one. compute_stretch is the mean over
// the median of the same short compute, less 1 (key "compute_stretch"): what the median tables leave out.
struct SyncWaitMeasure {
  double wait_per_compute = 0;  // seconds waited at meetings per second of compute between them
  double compute_stretch = 0;   // mean / median - 1 of the compute chunks (>= 0)
};

// Every rank runs the same compute (f32 GEMMs of 128 x 128 x 128, in chunks of 1, 4 and 16 GEMMs: about 0.1-2 ms on
// one core) and then exchanges a count with every peer (comm::exchange_counts, the expert dispatch's first
// exchange), `syncs` times per chunk size, chunk sizes interleaved; the wait beyond the exchange's own cost (the
// median of the same exchange run back to back, no compute between) is summed over the meetings, and divided by the
// compute time summed; the chunks' time summed over (their count x their median), per size, summed, gives the stretch.
// Mean over the ranks. Needs comm.size() >= 2.
SyncWaitMeasure measure_sync_wait(comm::Communicator& comm, int syncs = 150);

}  // namespace cleave::planner
