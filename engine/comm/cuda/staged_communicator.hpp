// StagedCommunicator: GPU tensors over a host communicator (the MPI backend) by staging them through pinned
// host memory; CUDA-aware MPI is not assumed. For GPU runs that do not want NCCL, e.g. several ranks sharing
// one GPU (NCCL refuses two ranks on one device).
//
// Invariants:
//  - A GPU tensor is never read by the host before the work queued on its stream has finished: an op enqueues
//    the device->host copies of its inputs on the caller's stream (a CPU stream means the legacy default stream
//    of the tensors' device) and the host waits for them before the inner op starts. The call therefore blocks
//    until the inputs are produced; the inner op then runs non-blocking as usual.
//  - A device output is written only after the inner op has completed, and only after the work queued on the
//    caller's stream before the op: Work::test()/wait() copy the host result back (host->device, on this
//    communicator's own high-priority copy stream for the device) and report completion only once that copy has
//    finished. So the outputs are valid when wait() returns or test() returns true, for work on any stream.
//  - Pinned buffers come from one PinnedHostAllocator shared with every communicator split from this one, are
//    held by the Work until its copies have finished, then go back to the allocator's cache: a steady-state
//    step makes no cudaHostAlloc (stats().system_allocations stops growing after the first step). Likewise the
//    ops' CUDA events come from per-device pools shared with the splits and go back when the Work finishes: a
//    steady-state step creates no event (events_made() stops growing). And the Works themselves come from a pool
//    shared with the splits, each keeping its vectors' capacity, and go back only once complete: a steady-state
//    step makes no heap allocation here (works_made() stops growing).
//  - Ops reach the inner communicator in issue order, inside the call, so collectives match across ranks
//    exactly as on the inner backend; every wait goes through the inner Work, so its watchdog still applies.
//
// Per op: inputs are copied device->host (all_reduce's tensor, reduce_scatter and all_gather inputs, broadcast
// on the root, p2p sends); outputs host->device (all_reduce's tensor, reduce_scatter and all_gather outputs,
// broadcast on the other ranks, p2p receives). In-place reduce_scatter / all_gather keep the in-place form on
// the host copy, and all_gather always gathers in place there (one pinned buffer). CPU tensors go to the inner
// communicator unchanged (after the host has waited for the stream when it is a CUDA stream); a batch_p2p may
// mix CPU and GPU tensors. All CUDA tensors of one op must be on one device, the stream's when the stream is a
// CUDA stream. Cost: each GPU byte crosses PCIe twice more than with NCCL, and the host blocks at issue.
//
// Not thread-safe (as every Communicator): one thread drives this communicator, its splits and their Works.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/cuda/caching_allocator.hpp"

namespace cleave::comm {

namespace detail {
struct StagingResources;
class StagedWork;
}

class StagedCommunicator final : public Communicator {
 public:
  // Takes ownership of `inner`, a communicator that carries CPU tensors (an MpiCommunicator; not NCCL, which
  // carries GPU tensors itself). `pinned`: the allocator to stage through; null creates one, shared with every
  // split of this communicator. Not collective: wrap the same kind of communicator on every member.
  explicit StagedCommunicator(std::unique_ptr<Communicator> inner,
                              std::shared_ptr<cuda::PinnedHostAllocator> pinned = nullptr);
  ~StagedCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string_view backend() const override;  // the inner backend's name + "+staging": "mpi+staging"
  const std::string& name() const override;   // the inner communicator's
  const std::vector<int>& world_ranks() const override;
  const CommOptions& options() const override;  // the inner communicator's (timeout, deterministic)

  Communicator& inner() const;
  // The pinned allocator (accounting, cap via set_limit, stats().system_allocations).
  cuda::PinnedHostAllocator& pinned_allocator() const;
  // CUDA events created so far by this communicator and every communicator split from it (the copies back's and
  // receives' ready events, pooled per device and reused: it stops growing after a warm-up step).
  std::size_t events_made() const;
  // Works made so far by this communicator and every communicator split from it (pooled: a finished Work is
  // reused by a later op, so this stops growing after a warm-up step; at most the Works in flight at once).
  std::size_t works_made() const;

  // Notes every host wait on device work as ops::HostWait::kCommunication: the issue-time wait for the caller's
  // stream (every op with device inputs, and ops on host tensors posted with a CUDA stream) and each wait() that
  // finds its op unfinished. Host-only ops on a CPU stream count nothing.
  void count_host_waits(ops::HostWaits* waits) override;

  // Forwards to the inner communicator (logs, aborts its in-flight ops, MPI_Abort).
  [[noreturn]] void abort(const std::string& reason) override;

 protected:
  // Collective over the inner communicator; the child wraps the inner split and shares the pinned allocator
  // and copy streams.
  std::unique_ptr<Communicator> split_impl(int color, int key, std::string name) override;
  WorkPtr all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) override;
  WorkPtr reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                              const Stream& stream) override;
  WorkPtr all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) override;
  WorkPtr broadcast_impl(const Tensor& tensor, int root, const Stream& stream) override;
  // The host waits for a CUDA `stream` first (as NCCL orders its barrier after the stream's work).
  WorkPtr barrier_impl(const Stream& stream) override;
  WorkPtr batch_p2p_impl(std::span<const P2POp> ops, const Stream& stream) override;

 private:
  StagedCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<detail::StagingResources> resources);
  // The stream the copies of an op on `device` are ordered on (see the file comment); checks the device.
  Stream device_stream(Device device, const Stream& stream, std::string_view op) const;
  Tensor pinned_like(const Tensor& t) const;
  // A Work for `op` on `device` from the pool shared with the splits (staged_work.hpp), not yet started.
  std::unique_ptr<detail::StagedWork, WorkRelease> take_work(const char* op, Device device) const;

  std::shared_ptr<Communicator> inner_;  // shared with the Works, which call abort() if they fail in a destructor
  std::shared_ptr<detail::StagingResources> resources_;
  std::string backend_;
  ops::HostWaits* host_waits_ = nullptr;  // the run's counter (count_host_waits), not owned
};

}  // namespace cleave::comm
