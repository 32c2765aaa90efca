// Internal to the staged backend (engine/comm/cuda): what its files share. StagingResources are the pinned allocator
// and per-device copy streams of a StagedCommunicator and its splits; StagedOp is what one GPU op leaves for its
// Work; StagedWork completes the inner op, then copies the host results back to the device.
// staged_communicator.cpp holds the communicator's own calls, staged_collectives.cpp the collectives.
//
// Invariants: a Work holds its pinned buffers until its copies back have finished (the allocator's cache gets them
// back only then, also after a failure); a Work reports completion only once the inner op has completed and its
// copies back have finished; a Work destroyed unfinished completes as wait() would, without counting a host wait.
// Its CUDA events (the copies back's, a receive's ready) come from the resources' per-device EventPools
// (engine/cuda/event_pool.hpp) and go back when it finishes (both have fired: the copy stream waited for the ready
// one before the copies), so a steady-state step creates no event.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/cuda/caching_allocator.hpp"
#include "engine/cuda/event_pool.hpp"
#include "engine/cuda/stream.hpp"

namespace cleave::comm::detail {

// Shared by a StagedCommunicator, its splits and their Works.
struct StagingResources {
  std::shared_ptr<cuda::PinnedHostAllocator> pinned;  // declared first: outlives the streams' pending copies
  std::map<int, cuda::CudaStream> copy_streams;       // per device, created on first use
  cuda::EventPools events;                            // per device, made on first use; outlives every Work's events

  const Stream& copy_stream(int device);
};

// What one GPU op leaves for its Work: pinned buffers to keep, results to copy back, and the caller's stream
// as it was at issue (when the host did not wait for it).
struct StagedOp {
  int device = 0;
  std::vector<Tensor> keep;                           // pinned inputs (the inner Work keeps them too)
  std::vector<std::pair<Tensor, Tensor>> copy_back;   // (device output, pinned result)
  cuda::PooledEvent ready;                            // the caller's stream at issue (record_ready), or empty
};

// Records the caller's `stream` as it is now into `staged`'s ready event, taken from `resources`' pool for
// staged.device (the caller holds a DeviceGuard for it): the copies back wait for it instead of the host.
void record_ready(StagedOp& staged, StagingResources& resources, const Stream& stream);

class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<StagingResources> resources, std::shared_ptr<Communicator> inner, std::string op,
             StagedOp staged, WorkPtr inner_work, ops::HostWaits* host_waits);
  // Completes an unfinished op as wait() does, without counting a host wait (the counter may be gone by now).
  ~StagedWork() override;

  bool test() override;
  // One host wait (kCommunication) per call that finds the op unfinished.
  void wait() override;

 private:
  void complete();
  void start_copy_back();
  // Releases the pinned buffers to the cache at once, so the next op of the same size reuses them.
  void finish();

  std::shared_ptr<StagingResources> resources_;  // first: destroyed after every pinned tensor below
  std::shared_ptr<Communicator> inner_;
  std::string op_;
  StagedOp staged_;
  cuda::PooledEvent copied_;  // recorded after the copies back
  WorkPtr inner_work_;
  ops::HostWaits* host_waits_;  // the run's counter, or null
  bool inner_done_ = false;
  bool done_ = false;
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
