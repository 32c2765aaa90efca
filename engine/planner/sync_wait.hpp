// The wait at a synchronization point (`cleave profile`'s sync_wait_per_compute and sync_wait_per_meeting,
// partition/measured_costs.hpp): what a rank loses when it must meet its peers inside a pass (an expert all-to-all,
// a ring hop, a tp all-reduce) beyond the collective's own back-to-back time. Ranks that run the same work arrive
// together only when nothing takes their cores; on a machine shared with other work (or a rank's own progress
// thread, or noise) each rank loses time slices at random moments, and at every meeting each rank waits for what its
// peers lost since the last one: a part that grows with the compute between meetings (per second of it) and a part
// that every meeting pays whatever came before it (waking the peer's progress, the first touch of the exchange's
// buffers after compute), measured apart by meeting after chunks of three sizes.
// Invariant: every rank of `comm` takes part in the same sequence of collectives; every figure returned is >= 0.
#pragma once

#include <vector>

#include "engine/comm/communicator.hpp"

namespace cleave::planner {

// The same lost time seen from the compute: `cleave profile` takes a block's time as the median of its runs, which
// leaves out the runs a lost time slice hit, while a training step pays every one. compute_stretch is the mean over
// the median of the same short compute, less 1 (key "compute_stretch"): what the median tables leave out.
struct SyncWaitMeasure {
  double wait_per_compute = 0;  // seconds waited at a meeting per second of compute before it (the fit's slope)
  double wait_per_meeting = 0;  // seconds every meeting waits beyond its back-to-back cost (the fit's intercept)
  double compute_stretch = 0;   // mean / median - 1 of the compute chunks (>= 0)
  double exchange_s = 0;        // the count exchange itself, back to back (10th percentile, mean over the ranks)
};

// One chunk size of the measurement: the mean compute before a meeting and the mean wait at it.
struct MeetingPoint {
  double compute_s = 0, wait_s = 0;
};
// wait = per_meeting + per_compute × compute, least squares over `points` (two or more distinct computes), both
// parts >= 0: a negative intercept refits the slope through the origin, a negative slope leaves the mean wait as
// the intercept.
struct MeetingWaitFit {
  double per_meeting_s = 0, per_compute = 0;
};
MeetingWaitFit fit_meeting_wait(const std::vector<MeetingPoint>& points);

// Every rank runs the same compute (f32 GEMMs of 128 x 128 x 128, in chunks of 1, 4 and 16 GEMMs: about 0.03-1 ms on
// one core) and then exchanges a count with every peer (comm::exchange_counts, the expert dispatch's first
// exchange), `syncs` times per chunk size, chunk sizes interleaved; the wait beyond the exchange's own cost (the
// 10th percentile of the same exchange run back to back, no compute between: its fast mode, the one stable from one
// profile to the next) is averaged per chunk size, as is the chunk's
// compute, each a mean over the ranks, and fit_meeting_wait splits it into its two parts; the chunks' time summed
// over (their count x their median), per size, summed, gives the stretch. Needs comm.size() >= 2.
SyncWaitMeasure measure_sync_wait(comm::Communicator& comm, int syncs = 150);

}  // namespace cleave::planner
