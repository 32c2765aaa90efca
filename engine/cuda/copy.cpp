// Tensor copies through cudaMemcpyAsync with cudaMemcpyDefault: unified addressing tells CUDA which side each
// pointer is on, so one path serves H2D, D2H, D2D and pinned H2H (copy.hpp).
#include "engine/cuda/copy.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"

namespace cleave::cuda {

void copy_async(const Tensor& dst, const Tensor& src, const Stream& stream) {
  CLEAVE_ASSERT(dst.defined() && src.defined(), "copy between undefined tensors");
  CLEAVE_ASSERT(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
                "copy {} {} on {} into {} {} on {}: dtype or element count differ", src.shape().str(),
                dtype_name(src.dtype()), src.device().str(), dst.shape().str(), dtype_name(dst.dtype()),
                dst.device().str());
  if (dst.nbytes() == 0) return;
  cudaStream_t native = native_stream(stream);
  DeviceGuard guard(stream.device().index);
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDefault, native));
}

void copy(const Tensor& dst, const Tensor& src, const Stream& stream) {
  copy_async(dst, src, stream);
  synchronize(stream);
}

Tensor to_device(const Tensor& src, Allocator& allocator, MemoryCategory category, const Stream& stream) {
  CLEAVE_ASSERT(allocator.device().is_cuda(), "to_device with an allocator on {}", allocator.device().str());
  Tensor dst = Tensor::empty(src.shape(), src.dtype(), category, allocator);
  copy(dst, src, stream);
  return dst;
}

Tensor to_host(const Tensor& src, const Stream& stream) {
  Tensor dst = Tensor::empty(src.shape(), src.dtype(), src.category(), cpu_allocator());
  copy(dst, src, stream);
  return dst;
}

void fill_bytes_async(const Tensor& t, unsigned char byte, const Stream& stream) {
  CLEAVE_ASSERT(t.device().is_cuda(), "fill_bytes_async on a {} tensor", t.device().str());
  if (t.nbytes() == 0) return;
  DeviceGuard guard(t.device().index);
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), byte, t.nbytes(), native_stream(stream)));
}

}  // namespace cleave::cuda
