// DeviceCompletions: the watchdog of NCCL ops that complete on the device (nccl_communicator.hpp).
//
// An op posted on a CUDA stream completes on the device: its Work's wait() makes the caller's stream wait for the
// op's done event and hands the event here, so the host never blocks on it. A thread owned by this object polls
// the outstanding events (cudaEventQuery, about every millisecond while any is outstanding) and hands each back
// (`on_fired`: the communicator's EventPool) once it has fired. An event still pending `timeout_s` after its op
// was posted expires: the thread records it, logs one line at once and calls `on_timeout` (the communicator's
// ncclCommAbort, so the queued NCCL kernels exit and a host blocked on a stream behind them returns). The full
// report (which peers do not answer) and MPI_Abort are left to the driving thread, which checks expired() at its
// next call into the communicator: MPI is driven by one thread. If the driving thread does not come back within a
// grace period (blocked outside any communicator call), the thread ends the process (exit code kWatchdogExitCode)
// so the launcher ends the job.
//
// Invariants: the thread never touches a Work, a tensor, an allocator or MPI; it calls CUDA event functions,
// `on_fired` and `on_timeout` (which must be safe from another thread) and the logger. An op's record is a slot
// reused by later ops: add() grows the slots only when all are outstanding, and the op's details are plain values
// (NcclOpDetails) formatted only when it expires, so handing an op over allocates nothing once the run is warm.
// Destroying this object stops and joins the thread, then destroys the events still outstanding (the device
// releases them once they fire).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/nccl/op_details.hpp"

namespace cleave::comm {

class DeviceCompletions {
 public:
  using Clock = std::chrono::steady_clock;

  struct Expired {
    std::string op;       // "all_reduce"
    std::string details;  // "4096 f32, sum"
    double elapsed_s = 0;
  };

  // `grace_s`: how long after an expiry the driving thread has to call expired() before the process ends.
  // `on_fired` takes back an event that has fired (called by the thread, with this object's mutex held).
  DeviceCompletions(int device, double timeout_s, double grace_s, std::string comm_name,
                    std::function<void(const std::string&)> on_timeout, std::function<void(cudaEvent_t)> on_fired);
  ~DeviceCompletions();
  DeviceCompletions(const DeviceCompletions&) = delete;
  DeviceCompletions& operator=(const DeviceCompletions&) = delete;

  // Takes ownership of `done`, recorded after the op `op` (a string literal, kept by pointer; posted at `posted`)
  // on the communicator's stream, until it fires (then on_fired gets it back).
  void add(cudaEvent_t done, const char* op, const detail::NcclOpDetails& details, Clock::time_point posted);
  // The op that expired, if one did (then the communicator is aborted). Calling it acknowledges the expiry.
  std::optional<Expired> expired();
  // Ops handed over whose events have not been seen to fire yet.
  std::size_t outstanding() const;

 private:
  struct Pending {
    cudaEvent_t done = nullptr;  // null: a free slot
    const char* op = "";
    detail::NcclOpDetails details;
    Clock::time_point posted;
  };

  void run();
  // One pass over the outstanding events (mutex held): frees the slots of fired ones; returns the earliest posted
  // of the expired ones.
  std::optional<Expired> poll_locked(Clock::time_point now);

  const int device_;
  const double timeout_s_;
  const double grace_s_;
  const std::string comm_name_;
  const std::function<void(const std::string&)> on_timeout_;
  const std::function<void(cudaEvent_t)> on_fired_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Pending> pending_;  // slots, outstanding_ of them in use
  std::size_t outstanding_ = 0;
  std::optional<Expired> expired_;
  bool acknowledged_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: started once every member above is constructed
};

}  // namespace cleave::comm
