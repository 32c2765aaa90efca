// Index status word helpers (index_status.hpp).
#include "kernels/cuda/index_status.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {

void reset_index_status(uint32_t* status, cudaStream_t stream) {
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(status, 0xff, sizeof(uint32_t), stream));
}

std::optional<int64_t> read_index_status(const uint32_t* status, cudaStream_t stream) {
  uint32_t value = kNoBadIndex;
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(&value, status, sizeof value, cudaMemcpyDeviceToHost, stream));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (value == kNoBadIndex) return std::nullopt;
  return static_cast<int64_t>(value);
}

int32_t read_device_int32(const int32_t* value, cudaStream_t stream) {
  int32_t out = 0;
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(&out, value, sizeof out, cudaMemcpyDeviceToHost, stream));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

}  // namespace cleave::kernels::cuda
