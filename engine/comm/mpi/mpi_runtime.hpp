// MpiRuntime: RAII owner of MPI_Init_thread / MPI_Finalize for one process, and the world communicator.
//
// Thread level: Cleave needs MPI_THREAD_SERIALIZED and asks for MPI_THREAD_MULTIPLE. The application's MPI
// calls are made by one thread at a time (communicators are not thread-safe, and the watchdog polls inside
// Work::wait rather than on a thread of its own), but that thread need not be the one that called MPI_Init
// (the trainer may drive communication from a worker), which MPI_THREAD_FUNNELED would forbid. MULTIPLE, where
// granted, lets the MPI backend's progress thread (progress_thread.hpp) poll beside that thread; where it is
// not, communicators run without it (parallel.p2p_progress "auto"). A library providing less than `required`
// is refused with an error naming both levels.
//
// Rank discovery: after MPI_Init the launcher's world rank and size (OMPI_COMM_WORLD_*, PMI_*, SLURM_PROCID
// with SLURM_STEP_NUM_TASKS, PMIX_RANK; launch_env.hpp) must equal MPI_COMM_WORLD's, or the constructor
// throws an Error naming the variables and both pairs of numbers.
//
// Invariants: at most one MpiRuntime per process; it finalizes MPI only if it initialized it (a host
// program may have done so itself); every communicator must be destroyed before it (their destructors
// skip MPI_Comm_free once MPI is finalized, so a wrong order leaks handles but does not crash).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/comm/mpi/mpi_communicator.hpp"

namespace cleave::comm {

enum class MpiThreadLevel { kSingle, kFunneled, kSerialized, kMultiple };
std::string_view mpi_thread_level_name(MpiThreadLevel level);  // "MPI_THREAD_SERIALIZED", ...

class MpiRuntime {
 public:
  // Initializes MPI asking for MPI_THREAD_MULTIPLE (or adopts an existing initialization), sets the log prefix
  // to the world rank. Throws Error if the launcher's rank or size disagrees with MPI's, or if the provided
  // thread level is below `required`.
  MpiRuntime(int* argc, char*** argv, MpiThreadLevel required = MpiThreadLevel::kSerialized);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  MpiThreadLevel provided() const { return provided_; }

  // A communicator over all ranks (a duplicate of MPI_COMM_WORLD; collective, call on every rank).
  std::unique_ptr<MpiCommunicator> world(const MpiOptions& options) const;

 private:
  bool owns_init_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  MpiThreadLevel provided_ = MpiThreadLevel::kSingle;
};

// For main(): prints "[rank r/N] message" to stderr and ends the job with `exit_code`: MPI_Abort when MPI is
// initialized and not finalized (so no peer hangs), std::exit otherwise.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

// For a command's error handler under MPI: ends the job with the error printed once. The failing ranks meet in
// a barrier on MPI_COMM_WORLD (which no communicator uses: they all work on duplicates). When every rank gets
// there within `agree_s` seconds (an error every rank sees: a bad config, a refused plan, a failure the ranks
// agreed on), rank 0 prints each distinct message once ("error: ..."; a message only some ranks saw is
// prefixed with them), MPI is finalized and every rank exits with `exit_code`: no MPI_Abort and its banner.
// Otherwise (a peer is still computing, or blocked on this rank) it prints its own message and aborts the job
// (abort_job), so no peer waits forever. `agree_s` stays short, below any train.comm_timeout_s, so a peer's
// watchdog does not end the job before this rank has said why. Without MPI, or on one rank, it prints the
// message and exits.
[[noreturn]] void end_job_after_error(const std::string& message, int exit_code = 1, double agree_s = 1.0);

}  // namespace cleave::comm
