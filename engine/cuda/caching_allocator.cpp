// Device and pinned-host allocators (caching_allocator.hpp). The base class holds the cache and the
// accounting; these only talk to CUDA on a miss or when the cache is released.
#include "engine/cuda/caching_allocator.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::cuda {

CudaCachingAllocator::CudaCachingAllocator(int device, cudaStream_t stream)
    : Allocator(Device::cuda(device)), stream_(stream) {
  const DeviceProbe probe = probe_devices();
  CLEAVE_CHECK(device >= 0 && device < probe.count,
               "CudaCachingAllocator for cuda:{}: {} CUDA device(s) are visible{}{}", device, probe.count,
               probe.reason.empty() ? "" : ": ", probe.reason);
}

CudaCachingAllocator::~CudaCachingAllocator() { release_cache(); }

void* CudaCachingAllocator::system_allocate(std::size_t bytes) {
  DeviceGuard guard(device().index);
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes) == cudaSuccess) return ptr;
  cudaGetLastError();  // an allocation failure is not sticky; clear it before trying again
  release_cache();
  if (cudaMalloc(&ptr, bytes) == cudaSuccess) return ptr;
  cudaGetLastError();
  return nullptr;  // the base class throws OutOfMemoryError naming the request and the usage
}

void CudaCachingAllocator::system_free(void* ptr, std::size_t) {
  DeviceGuard guard(device().index);
  // A cached block may still be read or written by queued work on the stream; let it finish first. (Once
  // idle, later calls return at once.) Errors are not thrown: this runs from destructors.
  cudaStreamSynchronize(stream_);
  cudaFree(ptr);
  cudaGetLastError();
}

void CudaCachingAllocator::zero_bytes(void* data, std::size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device().index);
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream_));
}

PinnedHostAllocator::PinnedHostAllocator() : Allocator(Device::cpu()) {}

PinnedHostAllocator::~PinnedHostAllocator() { release_cache(); }

void* PinnedHostAllocator::system_allocate(std::size_t bytes) {
  void* ptr = nullptr;
  if (cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable) == cudaSuccess) return ptr;
  cudaGetLastError();
  return nullptr;
}

void PinnedHostAllocator::system_free(void* ptr, std::size_t) {
  cudaFreeHost(ptr);
  cudaGetLastError();
}

}  // namespace cleave::cuda
