// NcclCommunicator: the NCCL backend of Communicator, for tensors on the rank's CUDA device.
//
// Bootstrap: rank 0 of an MPI communicator creates the ncclUniqueId and broadcasts it over MPI; sub-groups
// come from ncclCommSplit (mirrored by an MPI split, which the watchdog uses). Communicators are created
// non-blocking (ncclConfig_t::blocking = 0), so no NCCL call can hang the host: every call that returns
// ncclInProgress is polled with ncclCommGetAsyncError under the watchdog.
//
// Streams: each communicator owns a CUDA stream. An op first makes that stream wait for an event recorded on
// the caller's `stream` (a CPU stream means the legacy default stream), then enqueues the NCCL call and a
// completion event. Work::test() queries the event and ncclCommGetAsyncError. On an asynchronous NCCL error the
// communicator is aborted (ncclCommAbort, never a destroy that can block) and the Work throws BackendError.
//
// Completion (docs/cuda.md, "Communication"):
//  - on a CUDA stream, wait() completes on the device: the caller's stream waits for the completion event
//    (cudaStreamWaitEvent) and wait() returns at once; the host does not block. The event goes to the
//    communicator's watchdog thread (device_completions.hpp), which polls it against options().timeout_s; on
//    timeout it aborts the communicator (ncclCommAbort: the NCCL kernels exit, a host blocked on a stream behind
//    them returns), and the next call into this communicator (any op, wait, test, split) reports the usual
//    `comm timeout after Xs in <op>` naming the peers that do not answer and ends the job with MPI_Abort.
//  - on a CPU stream, or with host completion (NcclOptions::host_completion or CLEAVE_NCCL_HOST_WAIT=1, for
//    debugging), wait() blocks the host, polling the event under the watchdog as before, and notes one host
//    wait in the counter of count_host_waits.
//
// Semantics that differ from MPI:
//  - batch_p2p: NCCL does not transmit tags; sends and receives between a pair of ranks match in posting
//    order (tags are checked for range only). All ops of a batch go into one ncclGroupStart/End.
//  - u16 (no NCCL type) is moved as bytes by copy ops; reductions on u16 are refused.
//  - Deterministic mode (floating types): a grouped send/recv exchange brings block q of every rank to rank
//    q, a kernel sums the n contributions in the canonical rank order of engine/core/sum_tree.hpp in f32
//    (ordered_reduce.hpp), and a second exchange spreads the results; bit-identical to the MPI backend's deterministic
//    mode for the same inputs. The contributions are staged in the communicator's own scratch, grown by the first
//    (warm-up) reductions and reused after that (staging_stats()), freed when the communicator goes.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"

namespace cleave::comm {

struct NcclOptions : CommOptions {
  // CUDA device of this rank; -1 picks it from the launcher's local rank (launch_env.hpp).
  int device = -1;
  // Every wait() blocks the host until the op is done, also on a CUDA stream (debugging; the environment
  // variable CLEAVE_NCCL_HOST_WAIT=1 sets it too). Off: ops on a CUDA stream complete on the device.
  bool host_completion = false;
};

// The deterministic reduction's staging scratch (stream_scratch.hpp): what it holds and how many times it grew
// (each growth one cudaMallocAsync; none in a steady-state step).
struct NcclStagingStats {
  std::size_t capacity_bytes = 0;
  std::int64_t growths = 0;
};

// The per-op pools (nccl_work.hpp): Works and done events made so far, each only when every one made was in
// flight; constant in a steady-state step.
struct NcclPoolStats {
  std::size_t works_made = 0;
  std::size_t events_made = 0;
};

namespace detail {
struct NcclCommState;
}

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`: every member builds its NcclCommunicator together (it splits `bootstrap` into
  // a private MPI mirror, then broadcasts the NCCL id over it). The NCCL communicator has the same members and
  // ranks as `bootstrap`, which may be destroyed afterwards.
  NcclCommunicator(MpiCommunicator& bootstrap, const NcclOptions& options);
  ~NcclCommunicator() override;  // finalizes under the watchdog, aborts if that fails

  int rank() const override;
  int size() const override;
  std::string_view backend() const override { return "nccl"; }
  const std::string& name() const override;
  const std::vector<int>& world_ranks() const override;
  const CommOptions& options() const override;

  int device() const;
  cudaStream_t stream() const;  // the communicator's own stream
  ncclComm_t native() const;
  // False in host-completion mode (NcclOptions::host_completion, CLEAVE_NCCL_HOST_WAIT=1).
  bool completes_on_device() const;
  // Ops completed on the device whose events the watchdog thread has not yet seen fire (tests).
  std::size_t outstanding_device_works() const;
  NcclStagingStats staging_stats() const;
  NcclPoolStats pool_stats() const;

  // Counts host-mode waits (wait() that blocks the host) as ops::HostWait::kCommunication.
  void count_host_waits(ops::HostWaits* waits) override;

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
  explicit NcclCommunicator(std::shared_ptr<detail::NcclCommState> state);
  void check_device(const Tensor& t, std::string_view op) const;

  std::shared_ptr<detail::NcclCommState> state_;
};

}  // namespace cleave::comm
