// Device-side record of invalid user indices (token ids, class targets). A kernel cannot throw, so kernels that
// read such indices skip the bad ones and atomicMin the smallest offending position into a uint32 status word
// on the device; the caller resets the word before the step and reads it where it synchronises anyway (the
// loss readback), then throws the same message the CPU kernel would.
//
// Invariant: the word holds kNoBadIndex (all bits set) until a kernel finds a bad index, then the smallest bad
// position seen since the reset.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

namespace cleave::kernels::cuda {

inline constexpr uint32_t kNoBadIndex = 0xffffffffu;

void reset_index_status(uint32_t* status, cudaStream_t stream);  // async: status := kNoBadIndex

// Blocks until `stream` has passed every kernel before it; the smallest bad position, or nothing.
std::optional<int64_t> read_index_status(const uint32_t* status, cudaStream_t stream);

// Reads one int32 from device memory (blocking on `stream`): the offending id for an error message.
int32_t read_device_int32(const int32_t* value, cudaStream_t stream);

}  // namespace cleave::kernels::cuda
