// EventPool: a communicator's completion events, created once and recorded again by later ops, so a steady-state
// step creates no CUDA event. The NCCL backend keeps one per communicator state (NcclWork takes one per op; the
// watchdog thread, DeviceCompletions, gives it back once it has fired); the staged backend one per device
// (EventPools, shared by a StagedCommunicator and its splits), held by PooledEvent for the life of a StagedWork.
//
// Invariants: take() creates an event only when none is free (every event made so far is in flight), and then
// reserves room for all of them, so give() never allocates; an event is given back only after its last record has
// fired (or its op failed: the communicator is then aborted), so a later record never stands in for an earlier
// op's; the pool destroys only the events it holds (one still in flight belongs to its holder). A mutex guards it:
// the driving thread takes and gives, the watchdog thread gives.
//
// The two CUDA calls are arguments (EventCalls, CUDA's by default), so the policy is tested without a GPU
// (tests/unit/cuda/event_pool_test.cpp). Events are created on the current device: a caller holds a DeviceGuard.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/cuda/cuda_check.hpp"

namespace cleave::cuda {

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

// One event taken from a pool, given back when this is destroyed or reset (or moved over): the holder's rule that
// its last record has fired by then is the caller's (StagedWork gives its events back once its copies back have
// finished). Empty when default-made or moved from. The pool outlives it.
class PooledEvent {
 public:
  PooledEvent() = default;
  explicit PooledEvent(EventPool& pool) : pool_(&pool), event_(pool.take()) {}
  ~PooledEvent() { reset(); }
  PooledEvent(PooledEvent&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), event_(std::exchange(other.event_, nullptr)) {}
  PooledEvent& operator=(PooledEvent&& other) noexcept {
    if (this != &other) {
      reset();
      pool_ = std::exchange(other.pool_, nullptr);
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  PooledEvent(const PooledEvent&) = delete;
  PooledEvent& operator=(const PooledEvent&) = delete;

  // Back to the pool now (nothing when empty).
  void reset() noexcept {
    if (pool_ != nullptr) pool_->give(event_);
    pool_ = nullptr;
    event_ = nullptr;
  }
  bool has_value() const { return event_ != nullptr; }
  cudaEvent_t native() const { return event_; }

 private:
  EventPool* pool_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

// One EventPool per device (an event belongs to the device current at its creation), made on a device's first use
// (the one allocation: a map node). The calls are every pool's. One driving thread (the communicators' rule).
class EventPools {
 public:
  explicit EventPools(EventCalls calls = {}) : calls_(calls) {}

  // `device`'s pool; the caller holds a DeviceGuard for `device` while it takes from it.
  EventPool& on(int device) {
    auto it = pools_.find(device);
    if (it == pools_.end()) it = pools_.try_emplace(device, calls_).first;
    return it->second;
  }
  // Events created so far over every device (in flight or idle).
  std::size_t made() const {
    std::size_t total = 0;
    for (const auto& [device, pool] : pools_) total += pool.made();
    return total;
  }

 private:
  EventCalls calls_;
  std::map<int, EventPool> pools_;
};

}  // namespace cleave::cuda
