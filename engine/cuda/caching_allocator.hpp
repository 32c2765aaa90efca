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
//  - When cudaMalloc runs out of memory, the cached blocks are returned to CUDA (after a warning naming the sizes)
//    and the request is tried once more before OutOfMemoryError; returning blocks first synchronises the stream,
//    so no queued kernel loses its memory. cudaFree also waits for every other stream of the device, NCCL's
//    included: docs/cuda.md ("Out of memory on a GPU") says what that can cost and why it is kept.
//  - Any other cudaMalloc / cudaHostAlloc error (CUDA reports an earlier kernel's sticky fault at the next call)
//    is a BackendError naming CUDA's error, never an out-of-memory.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "engine/core/allocator.hpp"

namespace cleave::cuda {

// What a failed allocation call means, as host functions (tested on the CPU: unit_cuda AllocationFailure.*).
enum class AllocationFailure { kOutOfMemory, kFault };
// cudaErrorMemoryAllocation is the only refusal for lack of memory; every other status is a fault.
AllocationFailure classify_allocation_failure(cudaError_t status);
// The BackendError text of a fault: the call, the request, the device and CUDA's name and text of `status`.
std::string allocation_fault_message(const char* call, std::size_t bytes, const std::string& device,
                                     cudaError_t status);
// The warning logged before an out-of-memory retry returns the cache to CUDA: the request, the bytes in use and
// reserved (`stats` of the allocator), and what cudaFree's device-wide wait can cost.
std::string cache_release_warning(const std::string& device, std::size_t bytes, const MemoryStats& stats);

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
