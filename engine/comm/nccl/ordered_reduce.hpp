// Device half of the NCCL backend's deterministic mode: out[i] = op(slot 0, slot 1, ..., slot n-1) in rank
// order, accumulated in f32 and rounded once, with the same NaN and signed-zero rules as the host
// ordered_reduce (engine/comm/host_reduce.hpp), so GPU and CPU deterministic results agree bit for bit.
// Slots are `stride` elements apart in `staged`. Launches on `stream`; returns the launch status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/core/dtype.hpp"

namespace cleave::comm {

// dtype: f32, bf16 or f16; is_max: max instead of sum. (Plain arguments keep this header free of the
// engine's heavier headers, which nvcc need not compile.)
cudaError_t ordered_reduce_on_device(DType dtype, bool is_max, const void* staged, int slots, std::int64_t stride,
                                     void* out, std::int64_t count, cudaStream_t stream);

}  // namespace cleave::comm
