// StreamBuffer: device memory taken with cudaMallocAsync on one stream and given back with cudaFreeAsync on the same
// stream, on every path. The deterministic reduction's staging (nccl_collectives.cpp) lives outside the run's caching
// allocator; a check that threw between its allocation and its free (a failed NCCL call inside the exchange, an
// asynchronous NCCL error, the reduction kernel's launch) leaked it for the rest of the process.
//
// Invariant: once constructed, the memory is freed exactly once, stream-ordered after everything already enqueued
// on `stream` (the exchange's sends and receives read and write it there): by free() (checked, throws on failure) or
// by the destructor when the scope is left by an exception (unchecked: the exception in flight is the report; a
// failed free is logged and cleared from CUDA's last error, so the next launch's check does not take it for its own).
// Declare it before any NcclGroup that uses it: the group must end before its memory goes.
//
// The two calls are arguments (StreamMemoryCalls, CUDA's by default), so the paths are tested without a GPU
// (tests/unit/cuda/stream_buffer_test.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "engine/core/log.hpp"
#include "engine/cuda/cuda_check.hpp"

namespace cleave::comm::detail {

struct StreamMemoryCalls {
  cudaError_t (*allocate)(void** ptr, std::size_t bytes, cudaStream_t stream) = cudaMallocAsync;
  cudaError_t (*release)(void* ptr, cudaStream_t stream) = cudaFreeAsync;
};

class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, cudaStream_t stream, StreamMemoryCalls calls = {})
      : stream_(stream), calls_(calls), bytes_(bytes) {
    void* ptr = nullptr;
    CLEAVE_CUDA_CHECK(calls_.allocate(&ptr, bytes_, stream_));
    data_ = static_cast<char*>(ptr);
  }
  ~StreamBuffer() {
    if (data_ == nullptr) return;
    const cudaError_t status = calls_.release(data_, stream_);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      log::warn("cudaFreeAsync of a {}-byte stream buffer failed while an error unwound: {} ({})", bytes_,
                cudaGetErrorName(status), cudaGetErrorString(status));
    }
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  char* data() const { return data_; }

  // Frees the memory on the stream now (checked); the destructor then does nothing.
  void free() {
    char* ptr = data_;
    data_ = nullptr;
    CLEAVE_CUDA_CHECK(calls_.release(ptr, stream_));
  }

 private:
  cudaStream_t stream_;
  StreamMemoryCalls calls_;
  std::size_t bytes_;
  char* data_ = nullptr;
};

}  // namespace cleave::comm::detail
