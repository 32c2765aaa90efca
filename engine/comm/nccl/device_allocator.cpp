// cudaMalloc-backed allocator (device_allocator.hpp).
#include "engine/comm/nccl/device_allocator.hpp"

#include "engine/comm/nccl/cuda_check.hpp"
#include "engine/comm/nccl/device_guard.hpp"

namespace cleave::comm {

CudaDeviceAllocator::CudaDeviceAllocator(int device) : Allocator(Device::cuda(device)) {}

CudaDeviceAllocator::~CudaDeviceAllocator() { release_cache(); }

void* CudaDeviceAllocator::system_allocate(std::size_t bytes) {
  DeviceGuard guard(device().index);
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state; the base class reports the refusal
    return nullptr;
  }
  return ptr;
}

void CudaDeviceAllocator::system_free(void* ptr, std::size_t) {
  DeviceGuard guard(device().index);
  cudaFree(ptr);
}

}  // namespace cleave::comm
