// The index status word's host side (index_status.hpp): reset to kNoBadIndex on the stream, and read back at a
// point that synchronises anyway (one copy and one stream wait), unpacked into the bad position and its value.
#include "kernels/cuda/index_status.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void reset_index_status(uint64_t* status, int count, cudaStream_t stream) {
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(status, 0xff, static_cast<std::size_t>(count) * sizeof(uint64_t), stream));
}

std::optional<BadIndex> read_index_status(const uint64_t* status, cudaStream_t stream) {
  uint64_t value = kNoBadIndex;
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(&value, status, sizeof value, cudaMemcpyDeviceToHost, stream));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (value == kNoBadIndex) return std::nullopt;
  return BadIndex{static_cast<int64_t>(value >> 32), static_cast<int32_t>(static_cast<uint32_t>(value))};
}

}  // namespace cleave::kernels::cuda
