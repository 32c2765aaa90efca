// Device-side record of invalid user indices (token ids, class targets). A kernel cannot throw, so kernels that
// read such indices skip the bad ones (zero row, ignored target) and record the smallest offending position
// together with the offending value in a 64-bit status word in device memory; the owner of the word reads it
// where it synchronises anyway (the step's end: ops::check_device_status) and throws the CPU kernel's message.
// The value travels with the position, so the check may run after the index tensor is gone.
//
// Invariant: the word holds kNoBadIndex (all bits set) until a kernel records a bad index, then
// (position << 32) | uint32(value) of the smallest bad position recorded since the reset (atomicMin on the
// packed word: deterministic whatever the thread order). Positions are below 2^32 (the kernels assert it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

namespace cleave::kernels::cuda {

inline constexpr uint64_t kNoBadIndex = ~uint64_t{0};

struct BadIndex {
  int64_t position = 0;  // token position or logits row, within the call that recorded it
  int32_t value = 0;     // the offending id or target
};

// Async on `stream`: `count` consecutive status words := kNoBadIndex.
void reset_index_status(uint64_t* status, int count, cudaStream_t stream);

// Blocks until `stream` has passed every kernel before it; the smallest bad position recorded, or nothing.
std::optional<BadIndex> read_index_status(const uint64_t* status, cudaStream_t stream);

}  // namespace cleave::kernels::cuda
