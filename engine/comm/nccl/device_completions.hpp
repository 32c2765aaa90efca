// DeviceCompletions: the watchdog of NCCL ops that complete on the device (nccl_communicator.hpp).
//
// An op posted on a CUDA stream completes on the device: its Work's wait() makes the caller's stream wait for the
// op's done event and hands the event here, so the host never blocks on it. A thread owned by this object polls
// the outstanding events (cudaEventQuery, about every millisecond while any is outstanding) and destroys each
// once it has fired. An event still pending `timeout_s` after its op was posted expires: the thread records it,
// logs one line at once and calls `on_timeout` (the communicator's ncclCommAbort, so the queued NCCL kernels
// exit and a host blocked on a stream behind them returns). The full report (which peers do not answer) and
// MPI_Abort are left to the driving thread, which checks expired() at its next call into the communicator: MPI is
// driven by one thread. If the driving thread does not come back within a grace period (blocked outside any
// communicator call), the thread ends the process (exit code kWatchdogExitCode) so the launcher ends the job.
//
// Invariants: the thread never touches a Work, a tensor, an allocator or MPI; it calls CUDA event functions,
// `on_timeout` (which must be safe from another thread) and the logger. Destroying this object stops and joins
// the thread, then destroys the events still outstanding (the device releases them once they fire).
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
  DeviceCompletions(int device, double timeout_s, double grace_s, std::string comm_name,
                    std::function<void(const std::string&)> on_timeout);
  ~DeviceCompletions();
  DeviceCompletions(const DeviceCompletions&) = delete;
  DeviceCompletions& operator=(const DeviceCompletions&) = delete;

  // Takes ownership of `done`, recorded after the op `op` (posted at `posted`) on the communicator's stream.
  void add(cudaEvent_t done, std::string op, std::string details, Clock::time_point posted);
  // The op that expired, if one did (then the communicator is aborted). Calling it acknowledges the expiry.
  std::optional<Expired> expired();
  // Ops handed over whose events have not been seen to fire yet.
  std::size_t outstanding() const;

 private:
  struct Pending {
    cudaEvent_t done = nullptr;
    std::string op;
    std::string details;
    Clock::time_point posted;
  };

  void run();
  // One pass over the outstanding events (mutex held): drops fired ones; returns the first expired one.
  std::optional<Expired> poll_locked(Clock::time_point now);

  const int device_;
  const double timeout_s_;
  const double grace_s_;
  const std::string comm_name_;
  const std::function<void(const std::string&)> on_timeout_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Pending> pending_;
  std::optional<Expired> expired_;
  bool acknowledged_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: started once every member above is constructed
};

}  // namespace cleave::comm
