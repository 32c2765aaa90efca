// The head dimensions each backend's attention kernels serve, header-only so the config can refuse a model its
// device cannot run before anything is built or moved to the device (engine/config/validate.cpp). The CUDA value is
// the memory-efficient kernels' limit (kernels/cuda/flash_attention.hpp kFlashMaxHeadDim: a warp's 32 lanes hold
// 4 dims each), which kernels/ops/cuda/cuda_attention.cpp asserts it equals; the CPU kernels have none (0).
#pragma once

#include <cstdint>

#include "engine/core/device.hpp"

namespace cleave::ops {

inline constexpr std::int64_t kCudaAttentionMaxHeadDim = 128;

// The largest head dimension attention serves on `type`; 0: no limit.
constexpr std::int64_t attention_max_head_dim(DeviceType type) {
  return type == DeviceType::kCuda ? kCudaAttentionMaxHeadDim : 0;
}

}  // namespace cleave::ops
