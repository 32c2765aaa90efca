// Device and pinned-host allocators (caching_allocator.hpp). The base class holds the cache and the
// accounting; these only talk to CUDA on a miss or when the cache is released.
#include "engine/cuda/caching_allocator.hpp"

#include <fmt/format.h>

#include "engine/core/log.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::cuda {

AllocationFailure classify_allocation_failure(cudaError_t status) {
  return status == cudaErrorMemoryAllocation ? AllocationFailure::kOutOfMemory : AllocationFailure::kFault;
}

std::string allocation_fault_message(const char* call, std::size_t bytes, const std::string& device,
                                     cudaError_t status) {
  return fmt::format(
      "{} of {} on {} failed: {} ({}). Not an out-of-memory: CUDA reports an earlier kernel's fault (sticky: every "
      "later call fails alike) at the next call; rerun under compute-sanitizer --tool memcheck, with "
      "CUDA_LAUNCH_BLOCKING=1 to name the kernel",
      call, format_bytes(static_cast<std::int64_t>(bytes)), device, cudaGetErrorString(status),
      cudaGetErrorName(status));
}

std::string cache_release_warning(const std::string& device, std::size_t bytes, const MemoryStats& stats) {
  return fmt::format(
      "{}: cudaMalloc of {} ran out of memory ({} in use, {} reserved); returning the cached blocks to CUDA and "
      "retrying. "
      "cudaFree waits for all work on the device, NCCL's kernels included: should a collective of this rank wait "
      "for a peer that waits for this rank, the run stops here with a comm timeout (docs/cuda.md, \"Out of memory "
      "on a GPU\")",
      device, format_bytes(static_cast<std::int64_t>(bytes)), format_bytes(stats.current_total),
      format_bytes(stats.reserved));
}

namespace {

// cudaMalloc: true with *ptr set, false when CUDA is out of memory (the error cleared: it is not sticky); throws
// BackendError on any other error.
bool device_malloc(void** ptr, std::size_t bytes, const Device& device) {
  const cudaError_t status = cudaMalloc(ptr, bytes);
  if (status == cudaSuccess) return true;
  if (classify_allocation_failure(status) == AllocationFailure::kFault) {
    throw BackendError(allocation_fault_message("cudaMalloc", bytes, device.str(), status));
  }
  cudaGetLastError();
  return false;
}

}  // namespace

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
  if (device_malloc(&ptr, bytes, device())) return ptr;
  log::warn("{}", cache_release_warning(device().str(), bytes, stats()));
  release_cache();  // nothing (no cudaFree) when the cache is empty
  if (device_malloc(&ptr, bytes, device())) return ptr;
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
  const cudaError_t status = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (status == cudaSuccess) return ptr;
  if (classify_allocation_failure(status) == AllocationFailure::kFault) {
    throw BackendError(allocation_fault_message("cudaHostAlloc", bytes, "pinned host memory", status));
  }
  cudaGetLastError();
  return nullptr;
}

void PinnedHostAllocator::system_free(void* ptr, std::size_t) {
  cudaFreeHost(ptr);
  cudaGetLastError();
}

}  // namespace cleave::cuda
