// MpiCommunicator: the MPI backend of Communicator, for CPU tensors of every dtype.
//
// Every op is non-blocking underneath (point-to-point protocols for floating-point reductions and all_gather,
// MPI_Iallreduce / MPI_Ireduce_scatter_block for integers, MPI_Ibcast, MPI_Ibarrier, MPI_Isend/Irecv) and Work::wait polls MPI_Test, sleeping
// only once nothing it waits for has completed for a while, so the watchdog (watchdog.hpp) can end the job when
// a peer never arrives.
//
// Dtypes: f32, i32, i64, u16 reduce (sum / max). Copy-only ops (all_gather, broadcast, p2p) move every dtype's
// raw values.
// Rank-ordered protocol, used by every floating-point reduction (f32, bf16, f16) in both modes: the tensor is
// cut into size() blocks; block q of every rank is sent to rank q (point-to-point, tagged with the op's sequence
// number), rank q combines the n contributions of ranks 0..n-1 in the canonical order of
// engine/core/sum_tree.hpp (16-bit types accumulate in f32 and round once), and all_reduce sends the result back
// to everyone. Same traffic as a ring all-reduce (2(n-1)/n of the data per rank), 16-bit values on the wire,
// memory one extra tensor. So floating-point reductions are deterministic in both modes (deterministic mode
// changes the GEMMs, not the MPI backend), and integer reductions (MPI's own) are exact. It replaced MPI's
// collectives for f32 because it measured 1.2-3.5x faster (mpi_work.hpp, rank_ordered).
// all_gather sends every rank's block straight to every other rank (copy only, any dtype); it replaced
// MPI_Iallgather, which took 84 ms for 64 MiB on 2 ranks where this takes 25.
// Large tensors: MPI counts are int, and a wait sees progress only when a request completes. Point-to-point
// messages (the protocols' and batch_p2p's) are cut into pieces of at most 4 MiB and
// MpiOptions::max_message_elements elements; a native (integer) all_reduce and broadcast into pieces of
// max_message_elements; an integer reduce_scatter whose per-rank block exceeds it is refused with an error
// naming the sizes.
// Handles: the communicator duplicates the MPI communicator it is built from (user traffic) and once more for
// its own point-to-point protocol; both use MPI_ERRORS_RETURN so failures surface as BackendError.
//
// Background progress (progress_thread.hpp): a root communicator (the public constructor) starts a progress
// thread when MpiOptions::progress asks for one and MPI provides MPI_THREAD_MULTIPLE; communicators split from
// it share it. It drives the MPI library's progress while any of their Works is outstanding, so a transfer
// posted before a long computation moves during it, not at the next MPI call (copy-in/copy-out transports
// such as Open MPI's vader with single copy off move large messages only inside MPI calls). Results are the
// same with and without it.
#pragma once

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/mpi/progress_thread.hpp"

namespace cleave::comm {

class LivenessProbe;

struct MpiOptions : CommOptions {
  // Largest element count passed to a single MPI call. Lower it only to exercise the piecewise path in tests.
  std::int64_t max_message_elements = INT_MAX;
  // Background progress thread (parallel.p2p_progress). Read by the public constructor only; split
  // communicators share their root's thread.
  P2PProgress progress = P2PProgress::kAuto;
  // Pause between the progress thread's polls: the shortest right after a Work starts (a message's protocol
  // steps follow each other closely), doubling up to the longest (the thread takes almost no time from a rank
  // that owns one core).
  // (Chosen with `cleave bench`: see progress_thread.hpp.)
  std::chrono::microseconds progress_min_interval{100};
  std::chrono::microseconds progress_max_interval{1000};
};

namespace detail {
struct MpiCommState;
}

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm` (which stays the caller's; this object works on duplicates).
  MpiCommunicator(MPI_Comm comm, const MpiOptions& options, std::string name = "world");
  ~MpiCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string_view backend() const override { return "mpi"; }
  const std::string& name() const override;
  const std::vector<int>& world_ranks() const override;
  const CommOptions& options() const override;
  // A progress thread runs, or Open MPI on one node moves messages by single copy (single_copy_transport).
  bool sends_progress_on_their_own() const override;
  const MpiOptions& mpi_options() const;

  // The duplicate that carries user traffic (for MPI code that must join this group, e.g. NCCL bootstrap).
  MPI_Comm native() const;
  // The probe shared by every communicator split from the same root; the NCCL backend reuses it.
  const std::shared_ptr<LivenessProbe>& probe() const;
  // Members' ranks in the probe's communicator.
  const std::vector<int>& probe_ranks() const;
  // The background progress thread shared with the root and its splits; null when there is none.
  const ProgressThread* progress_thread() const;

  // Blocking, with the watchdog: MPI_Ibarrier polled to completion. Used before blocking MPI calls
  // (MPI_Comm_split, MPI_Comm_dup) so a missing peer ends in a timeout, not a hang.
  void guarded_barrier(const char* op) const;

  [[noreturn]] void abort(const std::string& reason) override;

 protected:
  std::unique_ptr<Communicator> split_impl(int color, int key, std::string name) override;
  WorkPtr all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) override;
  WorkPtr reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                              const Stream& stream) override;
  WorkPtr all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) override;
  WorkPtr broadcast_impl(const Tensor& tensor, int root, const Stream& stream) override;
  WorkPtr barrier_impl(const Stream& stream) override;
  WorkPtr batch_p2p_impl(std::span<const P2POp> ops, const Stream& stream) override;

 private:
  explicit MpiCommunicator(std::shared_ptr<detail::MpiCommState> state);
  void check_cpu(const Tensor& t, std::string_view op) const;

  std::shared_ptr<detail::MpiCommState> state_;
};

}  // namespace cleave::comm
