// CudaDeviceAllocator: a cleave::Allocator over cudaMalloc for one device, so Tensors on cuda:N can be made for
// the NCCL backend's tests and benchmark (accounting, categories and the cap come from the base class).
// Blocks are cached by the base class and returned to CUDA when the allocator is destroyed.
#pragma once

#include "engine/core/allocator.hpp"

namespace cleave::comm {

class CudaDeviceAllocator final : public Allocator {
 public:
  explicit CudaDeviceAllocator(int device);
  ~CudaDeviceAllocator() override;

 protected:
  void* system_allocate(std::size_t bytes) override;
  void system_free(void* ptr, std::size_t bytes) override;
};

}  // namespace cleave::comm
