// The NCCL backend's shared pieces (nccl_work.hpp): a communicator's state (abort, finalize, the timeout report,
// polling a non-blocking call) and NcclWork's completion on the device or on the host. Invariant: no host wait
// outlasts train.comm_timeout_s: every poll serves the liveness probe and ends the job through the watchdog,
// naming the op and the group, once the timeout has passed. The Works and their events are pooled (nccl_work.hpp).
#include "engine/comm/nccl/nccl_work.hpp"

#include <algorithm>
#include <optional>

#include "engine/comm/nccl/cuda_check.hpp"
#include "engine/core/log.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/ops/host_waits.hpp"

namespace cleave::comm::detail {
namespace {

cudaStream_t caller_stream(const Stream& stream) {
  return stream.device().is_cuda() && stream.native() != nullptr ? static_cast<cudaStream_t>(stream.native())
                                                                   : cudaStreamLegacy;
}

}  // namespace

NcclCommState::NcclCommState() = default;

NcclCommState::~NcclCommState() {
  completions.reset();  // stops the watchdog thread before the communicator goes (it destroys its own events)
  works.clear();        // idle: they hold neither the state nor an event
  cleave::cuda::DeviceGuard guard(device, std::nothrow);
  events.clear();
  if (comm != nullptr && !aborted) {
    // Flush outstanding work; a peer that is gone must not hold up the destructor past the timeout.
    ncclResult_t state = ncclCommFinalize(comm);
    PollBackoff backoff;
    while (state == ncclSuccess || state == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress) break;
      if (backoff.elapsed_s() > options.timeout_s) break;
      backoff.pause();
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm);
    } else {
      log::warn("nccl comm '{}': finalize did not complete ({}); aborting it", name, ncclGetErrorString(state));
      ncclCommAbort(comm);
    }
  }
  // After the communicator that receives into it is finalized or aborted; ordered on `stream`, which goes next.
  staging.release_unchecked();
  if (barrier_word != nullptr) cudaFree(barrier_word);
  if (ready != nullptr) cudaEventDestroy(ready);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

void NcclCommState::abort_comm(const std::string& reason) {
  if (abort_started.exchange(true)) return;
  std::lock_guard<std::recursive_mutex> lock(comm_mutex);
  abort_reason = reason;
  aborted = true;
  if (comm != nullptr) ncclCommAbort(comm);
}

DeviceCompletions& NcclCommState::device_completions() {
  if (completions == nullptr) {
    // Grace for the driving thread to report an expiry: as long as a liveness probe of the peers could take.
    completions = std::make_unique<DeviceCompletions>(
        device, options.timeout_s, std::max(30.0, options.timeout_s), name,
        [this](const std::string& why) { abort_comm(why); }, [this](cudaEvent_t fired) { events.give(fired); });
  }
  return *completions;
}

void NcclCommState::surface() {
  if (completions == nullptr) return;
  if (std::optional<DeviceCompletions::Expired> late = completions->expired()) {
    expire(late->op, late->details + "; the op was completing on the device (its Work's wait() had returned)",
           late->elapsed_s);
  }
}

TimeoutContext NcclCommState::timeout_context(std::string op, std::string details) const {
  return {std::move(op), name, mpi->world_ranks(), mpi->probe_ranks(), std::move(details), options.timeout_s};
}

void NcclCommState::expire(const std::string& op, const std::string& details, double elapsed_s) {
  watchdog_expire(*mpi->probe(), timeout_context(op, details), elapsed_s, [this] { abort_comm("watchdog timeout"); });
}

void NcclCommState::wait_ready(ncclComm_t target, std::string_view op) {
  ncclResult_t state = ncclInProgress;
  CLEAVE_NCCL_CHECK(ncclCommGetAsyncError(target, &state));
  PollBackoff backoff;
  while (state == ncclInProgress) {
    if (backoff.slow_tick()) {
      mpi->probe()->serve();
      if (backoff.elapsed_s() > options.timeout_s) {
        expire(std::string(op), "waiting for NCCL to accept the call", backoff.elapsed_s());
      }
    }
    backoff.pause();
    CLEAVE_NCCL_CHECK(ncclCommGetAsyncError(target, &state));
  }
  if (state != ncclSuccess) {
    const std::string detail = fmt::format("{} on nccl comm '{}': {} ({})", op, name, ncclGetErrorString(state),
                                           ncclGetLastError(target));
    abort_comm(detail);
    throw BackendError(detail);
  }
}

NcclWork::Ptr NcclWork::take(const std::shared_ptr<NcclCommState>& state, const char* op, const Stream& stream) {
  Ptr work(state->works.take([] { return std::unique_ptr<NcclWork>(new NcclWork()); }).release());
  // Complete (so dropping it on a throw below just returns it to the pool) until the op is set up.
  work->state_ = state;
  work->op_ = op;
  work->caller_ = caller_stream(stream);
  work->device_side_ = !state->host_completion && stream.device().is_cuda() && stream.native() != nullptr;
  work->posted_ = std::chrono::steady_clock::now();
  state->surface();
  if (state->aborted) {
    throw BackendError(fmt::format("{} on nccl comm '{}': the communicator was aborted ({})", op, state->name,
                                   state->abort_reason));
  }
  work->done_ = state->events.take();
  CLEAVE_CUDA_CHECK(cudaEventRecord(state->ready, work->caller_));
  CLEAVE_CUDA_CHECK(cudaStreamWaitEvent(state->stream, state->ready, 0));
  work->complete_ = false;
  return work;
}

NcclWork::~NcclWork() {
  finish_before_release();
  if (state_ != nullptr) state_->events.give(done_);
}

void NcclWork::finish_before_release() noexcept {
  if (complete_ || failed_) return;
  try {
    if (device_side_) {
      hand_off();
    } else {
      poll_until_complete();
    }
  } catch (const std::exception& e) {
    log::error("{} on nccl comm '{}' failed while its Work was destroyed: {}", op_, state_->name, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void NcclWork::recycle() noexcept {
  finish_before_release();
  // Fired (complete on the host), or its op failed and the communicator is aborted; null once handed off.
  state_->events.give(done_);
  done_ = nullptr;
  keep_.clear();
  details_.clear();
  op_ = "";
  caller_ = nullptr;
  complete_ = true;
  failed_ = false;
  // The state may go with this last reference, and this Work with its pool: nothing of *this is touched after.
  const std::shared_ptr<NcclCommState> state = std::move(state_);
  state->works.give(std::unique_ptr<NcclWork>(this));
}

void NcclWork::enqueued() { CLEAVE_CUDA_CHECK(cudaEventRecord(done_, state_->stream)); }

bool NcclWork::test() {
  if (complete_) return true;
  state_->surface();
  std::lock_guard<std::recursive_mutex> lock(state_->comm_mutex);  // the watchdog thread may abort `comm`
  if (state_->aborted) {
    failed_ = true;
    throw BackendError(fmt::format("{} on nccl comm '{}': the communicator was aborted ({})", op_, state_->name,
                                   state_->abort_reason));
  }
  // Not ready is an answer, but cudaEventQuery also leaves it as this thread's last error: query_event clears it,
  // or the next kernel launch's check (cudaGetLastError) would report "device not ready" as its own failure.
  const cudaError_t status = cleave::cuda::query_event(done_);
  if (status == cudaSuccess) {
    complete_ = true;
    keep_.clear();
    return true;
  }
  if (status != cudaErrorNotReady) {
    failed_ = true;
    CLEAVE_CUDA_CHECK(status);
  }
  ncclResult_t async = ncclSuccess;
  const ncclResult_t query = ncclCommGetAsyncError(state_->comm, &async);
  if (query != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
    failed_ = true;
    const ncclResult_t bad = query != ncclSuccess ? query : async;
    const std::string detail = fmt::format("{} on nccl comm '{}' ({}): {} ({})", op_, state_->name,
                                           format_details(details_), ncclGetErrorString(bad),
                                           ncclGetLastError(state_->comm));
    state_->abort_comm(detail);
    throw BackendError(detail);
  }
  return false;
}

void NcclWork::wait() {
  if (complete_) return;
  if (device_side_) {
    hand_off();
    return;
  }
  if (state_->host_waits != nullptr) state_->host_waits->note(ops::HostWait::kCommunication);
  poll_until_complete();
}

void NcclWork::poll_until_complete() {
  PollBackoff backoff;
  while (!test()) {
    if (backoff.slow_tick()) {
      state_->mpi->probe()->serve();
      if (backoff.elapsed_s() > state_->options.timeout_s) {
        state_->expire(op_, format_details(details_), backoff.elapsed_s());
      }
    }
    backoff.pause();
  }
}

// The tensors are released at hand-off: the memory may return to an allocator ordered on the caller's stream,
// whose next use is ordered after the op (communicator.hpp).
void NcclWork::hand_off() {
  state_->surface();
  if (state_->aborted) {
    failed_ = true;
    throw BackendError(fmt::format("{} on nccl comm '{}': the communicator was aborted ({})", op_, state_->name,
                                   state_->abort_reason));
  }
  CLEAVE_CUDA_CHECK(cudaStreamWaitEvent(caller_, done_, 0));
  state_->device_completions().add(done_, op_, details_, posted_);
  done_ = nullptr;
  keep_.clear();
  complete_ = true;
}

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU16: break;
  }
  return ncclInt8;
}

}  // namespace cleave::comm::detail
