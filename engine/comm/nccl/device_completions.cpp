// DeviceCompletions (device_completions.hpp).
//
// Why a thread and not polling from the driving thread alone: in a steady-state step the host's only wait is the
// step end's read-back, a stream synchronisation behind every collective of the step. If a peer hangs, that
// synchronisation never returns and no communicator call comes to poll; only a thread of its own can notice the
// timeout and abort the communicator, which lets the synchronisation return.
#include "engine/comm/nccl/device_completions.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "engine/comm/mpi/watchdog.hpp"
#include "engine/core/log.hpp"
#include "engine/cuda/stream.hpp"

namespace cleave::comm {

namespace {
constexpr auto kPollInterval = std::chrono::milliseconds(1);
}

DeviceCompletions::DeviceCompletions(int device, double timeout_s, double grace_s, std::string comm_name,
                                     std::function<void(const std::string&)> on_timeout)
    : device_(device),
      timeout_s_(timeout_s),
      grace_s_(grace_s),
      comm_name_(std::move(comm_name)),
      on_timeout_(std::move(on_timeout)),
      thread_([this] { run(); }) {}

DeviceCompletions::~DeviceCompletions() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (Pending& p : pending_) cudaEventDestroy(p.done);
}

void DeviceCompletions::add(cudaEvent_t done, std::string op, std::string details, Clock::time_point posted) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(Pending{done, std::move(op), std::move(details), posted});
  }
  wake_.notify_all();
}

std::optional<DeviceCompletions::Expired> DeviceCompletions::expired() {
  std::optional<Expired> late;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!expired_.has_value()) return std::nullopt;
    acknowledged_ = true;
    late = expired_;
  }
  wake_.notify_all();
  return late;
}

std::size_t DeviceCompletions::outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

std::optional<DeviceCompletions::Expired> DeviceCompletions::poll_locked(Clock::time_point now) {
  std::optional<Expired> first;
  auto fired = [&](Pending& p) {
    const cudaError_t status = cleave::cuda::query_event(p.done);  // leaves no not-ready behind
    if (status == cudaSuccess) {
      cudaEventDestroy(p.done);
      return true;
    }
    // A device error: the op stays outstanding until it times out; a non-sticky one is not left pending here.
    if (status != cudaErrorNotReady) cudaGetLastError();
    const double age = std::chrono::duration<double>(now - p.posted).count();
    if (age > timeout_s_ && !first.has_value()) first = Expired{p.op, p.details, age};
    return false;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), fired), pending_.end());
  return first;
}

void DeviceCompletions::run() {
  cudaSetDevice(device_);  // this thread's current device: the events' (queries work across devices regardless)
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (expired_.has_value()) {
      // The communicator is aborted; wait for the driving thread to report it, within the grace period.
      if (!wake_.wait_for(lock, std::chrono::duration<double>(grace_s_), [this] { return stop_ || acknowledged_; })) {
        log::error("nccl comm '{}': {} completing on the device timed out and the communicator was aborted, but no "
                   "call into the communicator came within {:.0f}s to report it; ending the process",
                   comm_name_, expired_->op, grace_s_);
        std::_Exit(kWatchdogExitCode);
      }
      if (stop_) break;
      wake_.wait(lock, [this] { return stop_; });
      break;
    }
    if (pending_.empty()) {
      wake_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      continue;
    }
    std::optional<Expired> late = poll_locked(Clock::now());
    if (late.has_value()) {
      expired_ = late;
      const std::string reason = "watchdog timeout: " + late->op + " (" + late->details + ") completing on the device";
      log::error("nccl comm '{}': {} ({}) not complete on the device after {:.1f}s (timeout {:.0f}s); aborting the "
                 "communicator (the report naming the peers follows at the next call into it)",
                 comm_name_, late->op, late->details, late->elapsed_s, timeout_s_);
      lock.unlock();
      on_timeout_(reason);  // ncclCommAbort: may take a while; the driving thread may take the mutex meanwhile
      lock.lock();
      continue;
    }
    wake_.wait_for(lock, kPollInterval, [this] { return stop_; });
  }
}

}  // namespace cleave::comm
