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
                                     std::function<void(const std::string&)> on_timeout,
                                     std::function<void(cudaEvent_t)> on_fired)
    : device_(device),
      timeout_s_(timeout_s),
      grace_s_(grace_s),
      comm_name_(std::move(comm_name)),
      on_timeout_(std::move(on_timeout)),
      on_fired_(std::move(on_fired)),
      thread_([this] { run(); }) {}

DeviceCompletions::~DeviceCompletions() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (Pending& p : pending_) {
    if (p.done != nullptr) cudaEventDestroy(p.done);
  }
}

void DeviceCompletions::add(cudaEvent_t done, const char* op, const detail::NcclOpDetails& details,
                            Clock::time_point posted) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto slot = std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.done == nullptr; });
    if (slot == pending_.end()) slot = pending_.emplace(pending_.end());  // all in use: the only growth
    slot->op = op;
    slot->details = details;  // copies into the slot's own capacity
    slot->posted = posted;
    slot->done = done;
    ++outstanding_;
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
  return outstanding_;
}

std::optional<DeviceCompletions::Expired> DeviceCompletions::poll_locked(Clock::time_point now) {
  const Pending* first = nullptr;
  for (Pending& p : pending_) {
    if (p.done == nullptr) continue;
    const cudaError_t status = cleave::cuda::query_event(p.done);  // leaves no not-ready behind
    if (status == cudaSuccess) {
      on_fired_(p.done);
      p.done = nullptr;
      --outstanding_;
      continue;
    }
    // A device error: the op stays outstanding until it times out; a non-sticky one is not left pending here.
    if (status != cudaErrorNotReady) cudaGetLastError();
    const bool late = std::chrono::duration<double>(now - p.posted).count() > timeout_s_;
    if (late && (first == nullptr || p.posted < first->posted)) first = &p;
  }
  if (first == nullptr) return std::nullopt;
  // Formatted here, once: the op has expired and the communicator is about to be aborted.
  return Expired{first->op, detail::format_details(first->details),
                 std::chrono::duration<double>(now - first->posted).count()};
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
    if (outstanding_ == 0) {
      wake_.wait(lock, [this] { return stop_ || outstanding_ != 0; });
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
