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
// stream_stretch is the same for a long stream of compute without a meeting (key "stream_stretch"): on a core shared
// with other work a rank that never blocks gets its fair share of the core, one that blocks every millisecond is
// woken ahead of the other work, so the stream loses far more (measured on a 2-core machine under other helpers'
// builds: 1.25-2.41 where the short compute's stretch was 0.04-0.09).
struct SyncWaitMeasure {
  double wait_per_compute = 0;  // seconds waited at a meeting per second of compute before it (the fit's slope)
  double wait_per_meeting = 0;  // seconds every meeting waits beyond its back-to-back cost (the fit's intercept)
  double compute_stretch = 0;   // mean / median - 1 of the compute chunks (>= 0)
  double exchange_s = 0;        // the count exchange itself, back to back (10th percentile, mean over the ranks)
  double stream_stretch = 0;    // mean time of a long compute stream without a meeting / the median's, less 1 (>= 0)
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
// over (their count x their median), per size, summed, gives the stretch. Every 30th round every rank also runs 48
// chunks of 16 GEMMs back to back (about 50 ms, no meeting inside) and meets once after them: their time over 48 x the
// 16-GEMM chunk's median, less 1, is the stream stretch (the streams interleaved with the meetings, so the same load
// lands on both). Needs comm.size() >= 2.
SyncWaitMeasure measure_sync_wait(comm::Communicator& comm, int syncs = 150);

}  // namespace cleave::planner
