// CudaCachingAllocator: the device allocator for cuda:N. Accounting by category, peaks, the cap and the size-keyed
// block cache all come from cleave::Allocator (engine/core/allocator.hpp), so a GPU run reports memory exactly
// as a CPU run does and device.memory_limit means the same thing.
//
// Invariants:
//  - Blocks are stream-ordered on the allocator's stream (cudaFreeAsync semantics without the async pool): a
//    block whose last Tensor is dropped goes back to the cache at once and may be handed out for the next
//    request without any synchronisation, because work on that stream that uses the new owner runs after
//    the work that used the old one. Work on ANOTHER stream that touches a tensor must be joined back into
//    the allocator's stream (CudaEvent::record there, wait here) before the tensor is released.
//  - cudaMalloc runs only on a cache miss (counted in stats().system_allocations). A training step repeats
//    the same sizes, so after the first step every request is a hit and the steady state calls no cudaMalloc.
//  - When cudaMalloc fails, the cached blocks are returned to CUDA and the request is tried once more before
//    OutOfMemoryError; returning blocks first synchronises the stream, so no queued kernel loses its memory.
#pragma once

#include <cuda_runtime_api.h>

#include "engine/core/allocator.hpp"

namespace cleave::cuda {

class CudaCachingAllocator final : public Allocator {
 public:
  // `stream`: the stream whose order makes reuse safe (null = the legacy default stream). Not owned; it must
  // outlive the allocator.
  explicit CudaCachingAllocator(int device, cudaStream_t stream = nullptr);
  ~CudaCachingAllocator() override;  // synchronises the stream and frees every cached block

  cudaStream_t stream() const { return stream_; }
  void zero_bytes(void* data, std::size_t bytes) override;  // cudaMemsetAsync on stream()

 protected:
  void* system_allocate(std::size_t bytes) override;
  void system_free(void* ptr, std::size_t bytes) override;

 private:
  cudaStream_t stream_;
};

// PinnedHostAllocator: page-locked host memory (cudaHostAlloc) for fast, truly asynchronous host<->device
// copies. Its tensors are CPU tensors (device cpu), usable by CPU kernels; accounting and cap as above.
// Host writes are not stream-ordered: keep a pinned tensor alive and unmodified until the copy that reads or
// writes it has finished (CudaEvent::synchronize or a stream synchronize), or its block may be reused by a
// new owner while the copy is still in flight.
class PinnedHostAllocator final : public Allocator {
 public:
  PinnedHostAllocator();
  ~PinnedHostAllocator() override;

 protected:
  void* system_allocate(std::size_t bytes) override;
  void system_free(void* ptr, std::size_t bytes) override;
};

}  // namespace cleave::cuda
