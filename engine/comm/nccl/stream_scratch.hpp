// StreamScratch: device scratch owned by one NCCL communicator (the deterministic reduction's staging,
// nccl_collectives.cpp), used only on the communicator's stream. It grows when a request is larger than what it
// holds and never shrinks, so a training step that repeats the warm-up step's reductions allocates nothing: no
// cudaMallocAsync and no cudaFreeAsync in the steady state (the rule of docs/architecture.md).
//
// Invariants:
//  - every use, growth and release is ordered on the one stream the memory was taken on: growing releases the old
//    block with cudaFreeAsync on that stream (after the reductions already enqueued there read it) and takes the
//    new one with cudaMallocAsync on the same stream, so no wait and no sync; the stream of a later request must be
//    the same (asserted).
//  - capacity is the request rounded up to kGranule (the stream-ordered pool's own granularity), so requests that
//    differ by less than a granule do not regrow; a request of 0 bytes takes nothing.
//  - the memory is released exactly once: by release() (checked), or by release_unchecked() or the destructor (a
//    failure is logged and cleared from CUDA's last error so the next launch's check does not report it). The owner
//    releases it before destroying the stream and after the NCCL communicator that writes it is finalized or
//    aborted.
//  - a failed growth leaves the scratch empty (the old block was already released), never half-grown.
//
// The two CUDA calls are arguments (StreamMemoryCalls, CUDA's by default), so the policy is tested without a GPU
// (tests/unit/cuda/stream_scratch_test.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/cuda/cuda_check.hpp"

namespace cleave::comm::detail {

struct StreamMemoryCalls {
  cudaError_t (*allocate)(void** ptr, std::size_t bytes, cudaStream_t stream) = cudaMallocAsync;
  cudaError_t (*release)(void* ptr, cudaStream_t stream) = cudaFreeAsync;
};

struct StreamScratchStats {
  std::size_t capacity_bytes = 0;  // what the scratch holds now
  std::int64_t growths = 0;        // allocations made (each one a cudaMallocAsync)
};

class StreamScratch {
 public:
  static constexpr std::size_t kGranule = std::size_t{2} << 20;  // 2 MiB

  explicit StreamScratch(StreamMemoryCalls calls = {}) : calls_(calls) {}
  ~StreamScratch() { release_unchecked(); }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  // At least `bytes` of device memory, usable on `stream` after everything already enqueued there; the contents
  // are undefined. Valid until the next reserve() or release(). Allocates only when bytes > capacity.
  char* reserve(std::size_t bytes, cudaStream_t stream) {
    if (bytes == 0 && data_ == nullptr) return nullptr;
    CLEAVE_ASSERT(data_ == nullptr || stream == stream_,
                  "StreamScratch: requested on another stream than the one its memory is ordered on");
    if (bytes <= stats_.capacity_bytes) return data_;
    release();
    const std::size_t capacity = (bytes + kGranule - 1) / kGranule * kGranule;
    void* ptr = nullptr;
    CLEAVE_CUDA_CHECK(calls_.allocate(&ptr, capacity, stream));
    data_ = static_cast<char*>(ptr);
    stream_ = stream;
    stats_.capacity_bytes = capacity;
    ++stats_.growths;
    return data_;
  }

  // Returns the memory on its stream now (checked, not retried on failure); a later reserve() allocates anew.
  void release() {
    char* ptr = data_;
    data_ = nullptr;
    stats_.capacity_bytes = 0;
    if (ptr != nullptr) CLEAVE_CUDA_CHECK(calls_.release(ptr, stream_));
  }

  // release() for destructors: never throws; a failure is logged (unless CUDA is already shutting down, at process
  // exit) and cleared from CUDA's last error. Returns the release's status.
  cudaError_t release_unchecked() noexcept {
    if (data_ == nullptr) return cudaSuccess;
    const std::size_t bytes = stats_.capacity_bytes;
    const cudaError_t status = calls_.release(data_, stream_);
    data_ = nullptr;
    stats_.capacity_bytes = 0;
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      if (status != cudaErrorCudartUnloading && status != cudaErrorContextIsDestroyed) {
        log::warn("cudaFreeAsync of the NCCL communicator's {}-byte staging scratch failed: {} ({})", bytes,
                  cudaGetErrorName(status), cudaGetErrorString(status));
      }
    }
    return status;
  }

  StreamScratchStats stats() const { return stats_; }

 private:
  StreamMemoryCalls calls_;
  cudaStream_t stream_ = nullptr;
  char* data_ = nullptr;
  StreamScratchStats stats_;
};

}  // namespace cleave::comm::detail
