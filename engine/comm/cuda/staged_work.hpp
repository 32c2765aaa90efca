// Internal to the staged backend (engine/comm/cuda): what its files share. StagingResources are the pinned allocator,
// per-device copy streams and event pools, and the pool of finished Works of a StagedCommunicator and its splits;
// StagedOp is what one GPU op leaves for its Work; StagedWork completes the inner op, then copies the host results
// back to the device. staged_communicator.cpp holds the communicator's own calls, staged_collectives.cpp the
// collectives.
//
// Invariants: a Work holds its pinned buffers until its copies back have finished (the allocator's cache gets them
// back only then, also after a failure); a Work reports completion only once the inner op has completed and its
// copies back have finished; a Work dropped unfinished completes as wait() would, without counting a host wait.
// Its CUDA events (the copies back's, a receive's ready) come from the resources' per-device EventPools
// (engine/cuda/event_pool.hpp) and go back when it finishes (both have fired: the copy stream waited for the ready
// one before the copies), so a steady-state step creates no event.
// No heap allocation per op once a run is warm: a dropped Work goes back to the resources' WorkPool
// (engine/comm/work_pool.hpp, StagedWork::take) only once it is complete, holding no buffer, event, inner Work or
// communicator, and keeps its vectors' capacity for the next op; the op's name is a string literal.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/work_pool.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/event_pool.hpp"
#include "engine/cuda/stream.hpp"

namespace cleave::comm::detail {

class StagedWork;

// Shared by a StagedCommunicator, its splits and their Works (an in-flight Work holds it; an idle one does not).
struct StagingResources {
  std::shared_ptr<cuda::PinnedHostAllocator> pinned;  // declared first: outlives the streams' pending copies
  std::map<int, cuda::CudaStream> copy_streams;       // per device, created on first use
  cuda::EventPools events;                            // per device, made on first use; outlives every Work's events
  WorkPool<StagedWork> works;                         // finished Works for the next ops; last, so deleted first

  StagingResources();
  ~StagingResources();
  StagingResources(const StagingResources&) = delete;
  StagingResources& operator=(const StagingResources&) = delete;

  const Stream& copy_stream(int device);
};

// What one GPU op leaves for its Work: pinned buffers to keep, results to copy back, the batch as posted on the
// inner communicator (batch_p2p), and the caller's stream as it was at issue (when the host did not wait for it).
// Part of a pooled Work: cleared when it finishes, its vectors' capacity kept.
struct StagedOp {
  static constexpr std::size_t kReserved = 16;  // per vector, so the usual ops never grow a fresh Work's

  int device = 0;
  std::vector<Tensor> keep;                           // pinned inputs (the inner Work keeps them too)
  std::vector<std::pair<Tensor, Tensor>> copy_back;   // (device output, pinned result)
  std::vector<P2POp> host_ops;                        // batch_p2p: its ops on host tensors, receives first
  cuda::PooledEvent ready;                            // the caller's stream at issue (record_ready), or empty

  StagedOp();
  // Empties it (buffers, event) and keeps the vectors' capacity.
  void clear() noexcept;
};

// Records the caller's `stream` as it is now into `staged`'s ready event, taken from `resources`' pool for
// staged.device (the caller holds a DeviceGuard for it): the copies back wait for it instead of the host.
void record_ready(StagedOp& staged, StagingResources& resources, const Stream& stream);

class StagedWork final : public Work {
 public:
  using Ptr = std::unique_ptr<StagedWork, WorkRelease>;

  // A Work for op `op` (a string literal: kept by pointer) on CUDA device `device`, from `resources`' pool, or a
  // new one when every Work made so far is in flight. It counts as complete (dropping it just returns it to the
  // pool) until start(); fill staged() first.
  static Ptr take(const std::shared_ptr<StagingResources>& resources, const std::shared_ptr<Communicator>& inner,
                  const char* op, int device, ops::HostWaits* host_waits);
  // Completes an unfinished op as wait() does, without counting a host wait (the counter may be gone by now).
  ~StagedWork() override;

  // What the op leaves for the Work (its buffers, copies back, ready event), filled between take() and start().
  StagedOp& staged() { return staged_; }
  // The inner op is posted: the Work is in flight from here until test() or wait() reports it complete.
  void start(WorkPtr inner_work);

  bool test() override;
  // One host wait (kCommunication) per call that finds the op unfinished.
  void wait() override;

  // Whether the Work is in flight (started, not yet complete nor failed): the pool never holds one that is.
  bool in_flight() const { return !done_ && !failed_; }
  // The vectors' capacity (the pool keeps it; a test reads it).
  std::size_t capacity() const {
    return staged_.keep.capacity() + staged_.copy_back.capacity() + staged_.host_ops.capacity();
  }

 protected:
  // Completes the Work if it is not (as the destructor does), empties it and gives it to the resources' pool.
  void recycle() noexcept override;

 private:
  StagedWork() = default;
  // The destructor's and recycle()'s completion: an error aborts the job through the inner communicator (no copy
  // back may outlive its buffers); after a failure, waits for a copy back still in flight.
  void finish_before_release() noexcept;
  void complete();
  void start_copy_back();
  // Releases the pinned buffers to the cache at once, so the next op of the same size reuses them.
  void finish();

  std::shared_ptr<StagingResources> resources_;  // null while idle in the pool
  std::shared_ptr<Communicator> inner_;          // null while idle
  const char* op_ = "";
  StagedOp staged_;
  cuda::PooledEvent copied_;  // recorded after the copies back
  WorkPtr inner_work_;
  ops::HostWaits* host_waits_ = nullptr;  // the run's counter, or null
  bool inner_done_ = false;
  bool done_ = true;  // an idle Work, and one not yet started, counts as complete
  bool failed_ = false;
};

// Notes one host wait (kCommunication) in `waits`, when there is a counter.
void note_wait(ops::HostWaits* waits);

// The host waits for the work queued on `stream` (nothing to wait for on a CPU stream); one host wait noted.
void host_wait(const Stream& stream, ops::HostWaits* waits);

// Copies the device tensor `device_input` into the pinned `host` on `stream`, and the host waits for it (one host
// wait noted): the inner op may read `host` from here.
void copy_to_host_and_wait(const Tensor& host, const Tensor& device_input, const Stream& stream,
                           ops::HostWaits* waits);

// Block `index` of `whole` cut into `blocks` equal parts, shaped as `shape` (same storage).
Tensor block_of(const Tensor& whole, int index, int blocks, const Shape& shape);

}  // namespace cleave::comm::detail
