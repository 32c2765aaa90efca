// EventPool: one NCCL communicator's completion events, created once and recorded again by later ops (NcclWork
// takes one per op; the watchdog thread, DeviceCompletions, gives it back once it has fired), so a steady-state
// step creates no CUDA event.
//
// Invariants: take() creates an event only when none is free (every event made so far is in flight), and then
// reserves room for all of them, so give() never allocates; an event is given back only after its last record has
// fired (or its op failed: the communicator is then aborted), so a later record never stands in for an earlier
// op's; the pool destroys only the events it holds (one still in flight belongs to its holder). A mutex guards it:
// the driving thread takes and gives, the watchdog thread gives.
//
// The two CUDA calls are arguments (EventCalls, CUDA's by default), so the policy is tested without a GPU
// (tests/unit/cuda/nccl_pool_test.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "engine/cuda/cuda_check.hpp"

namespace cleave::comm::detail {

struct EventCalls {
  cudaError_t (*create)(cudaEvent_t* event, unsigned int flags) = cudaEventCreateWithFlags;
  cudaError_t (*destroy)(cudaEvent_t event) = cudaEventDestroy;
};

class EventPool {
 public:
  explicit EventPool(EventCalls calls = {}) : calls_(calls) {}
  ~EventPool() { clear(); }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A free event (its last record has fired), or a new one (timing disabled) when none is free. Throws if CUDA
  // cannot create one.
  cudaEvent_t take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t event = free_.back();
      free_.pop_back();
      return event;
    }
    free_.reserve(made_ + 1);
    cudaEvent_t event = nullptr;
    CLEAVE_CUDA_CHECK(calls_.create(&event, cudaEventDisableTiming));
    ++made_;
    return event;
  }

  // Back into the pool; no allocation (the reserve in take()).
  void give(cudaEvent_t event) noexcept {
    if (event == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(event);
  }

  // Destroys the free events (errors ignored: called at the communicator's end).
  void clear() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (cudaEvent_t event : free_) calls_.destroy(event);
    made_ -= free_.size();
    free_.clear();
  }

  std::size_t made() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return made_;
  }
  std::size_t idle() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return free_.size();
  }

 private:
  EventCalls calls_;
  mutable std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
  std::size_t made_ = 0;
};

}  // namespace cleave::comm::detail
