// Internal to kernels/cuda/*.cu: recording a bad user index in a status word (index_status.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cleave::kernels::cuda::detail {

__device__ __forceinline__ void record_bad_index(uint64_t* status, int64_t position, int32_t value) {
  const unsigned long long packed =
      (static_cast<unsigned long long>(position) << 32) | static_cast<unsigned long long>(static_cast<uint32_t>(value));
  atomicMin(reinterpret_cast<unsigned long long*>(status), packed);
}

}  // namespace cleave::kernels::cuda::detail
