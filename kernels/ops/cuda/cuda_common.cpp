// What the CUDA backend's slot files share (cuda_slots.hpp): stream and scratch of a Context, f32 views of bf16
// tensors, and the device status words behind ops::check_device_status.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "engine/core/log.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/stream.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/index_status.hpp"
#include "kernels/ops/cuda/cuda_slots.hpp"

namespace cleave::ops::cuda_detail {

cudaStream_t stream_of(const Context& ctx) { return cuda::native_stream(*ctx.stream); }

Tensor scratch(const Context& ctx, std::size_t bytes) {
  const auto words = static_cast<std::int64_t>((bytes + 7) / 8);
  return Tensor::empty(Shape{words > 0 ? words : 1}, DType::kI64, MemoryCategory::kWorkspace, *ctx.allocator);
}

kd::FloatType float_type(const Tensor& t) {
  return t.dtype() == DType::kBF16 ? kd::FloatType::kBF16 : kd::FloatType::kF32;
}

F32In::F32In(const Context& ctx, const Tensor& t) {
  if (!t.defined()) return;
  if (t.dtype() == DType::kF32) {
    ptr_ = t.data<float>();
    return;
  }
  scratch_ = Tensor::empty(t.shape(), DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
  kd::cast_bf16_to_f32(static_cast<const __nv_bfloat16*>(t.raw_data()), scratch_.data<float>(), t.numel(),
                       stream_of(ctx));
  ptr_ = scratch_.data<float>();
}

F32Out::F32Out(const Context& ctx, const Tensor& t, bool read) : ctx_(ctx), target_(t) {
  if (!t.defined()) return;
  if (t.dtype() == DType::kF32) {
    ptr_ = t.data<float>();
    return;
  }
  scratch_ = Tensor::empty(t.shape(), DType::kF32, MemoryCategory::kWorkspace, *ctx.allocator);
  ptr_ = scratch_.data<float>();
  if (read) {
    kd::cast_bf16_to_f32(static_cast<const __nv_bfloat16*>(t.raw_data()), ptr_, t.numel(), stream_of(ctx));
  }
}

void F32Out::finish() {
  if (!scratch_.defined()) return;
  const Tensor scratch = std::move(scratch_);  // freed on the stream after the cast (stream-ordered allocator)
  scratch_ = Tensor();
  kd::cast_f32_to_bf16(ptr_, static_cast<__nv_bfloat16*>(target_.raw_data()), target_.numel(), stream_of(ctx_));
}

F32Out::~F32Out() {
  if (!scratch_.defined()) return;
  const cudaError_t status = kd::detail::launch_cast_f32_to_bf16(ptr_, static_cast<__nv_bfloat16*>(target_.raw_data()),
                                                                 target_.numel(), stream_of(ctx_));
  if (status != cudaSuccess) {  // a destructor cannot throw, and the launcher's cudaGetLastError cleared the error
    log::error("cast_f32_to_bf16_kernel (narrowing a bf16 output of {} elements on {}) failed to launch: {}",
               target_.numel(), ctx_.device.str(), cudaGetErrorString(status));
  }
}

DeviceStatus::~DeviceStatus() {
  if (words_ != nullptr) {
    cuda::DeviceGuard guard(device_, std::nothrow);
    cudaFree(words_);  // not checked: a destructor must not throw
  }
}

std::uint64_t* DeviceStatus::words(cudaStream_t stream) {
  if (words_ == nullptr) {
    cuda::DeviceGuard guard(device_);
    void* memory = nullptr;
    CLEAVE_CUDA_CHECK(cudaMalloc(&memory, 2 * sizeof(std::uint64_t)));
    words_ = static_cast<std::uint64_t*>(memory);
    kd::reset_index_status(words_, 2, stream);
  }
  return words_;
}

std::uint64_t* DeviceStatus::ids_word(std::int64_t vocab, cudaStream_t stream) {
  ids_vocab_ = vocab;
  return words(stream);
}

std::uint64_t* DeviceStatus::targets_word(std::int64_t vocab, cudaStream_t stream) {
  targets_vocab_ = vocab;
  return words(stream) + 1;
}

void DeviceStatus::check(cudaStream_t stream) {
  if (words_ == nullptr) {  // nothing has recorded into it yet; the wait is still the contract (ops.hpp)
    CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  std::uint64_t host[2] = {kd::kNoBadIndex, kd::kNoBadIndex};
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(host, words_, sizeof host, cudaMemcpyDeviceToHost, stream));
  CLEAVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host[0] == kd::kNoBadIndex && host[1] == kd::kNoBadIndex) return;
  kd::reset_index_status(words_, 2, stream);
  const auto position = [](std::uint64_t w) { return static_cast<std::int64_t>(w >> 32); };
  const auto value = [](std::uint64_t w) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(w)); };
  if (host[0] != kd::kNoBadIndex) {
    CLEAVE_THROW(
        "embedding: token id {} at position {} is out of range [0, {}) (vocab_size {}); check that the data was "
        "tokenized with this model's vocabulary",
        value(host[0]), position(host[0]), ids_vocab_, ids_vocab_);
  }
  CLEAVE_THROW("cross_entropy: target {} at row {} is out of range [0, {}) (number of classes {}; -1 marks an ignored "
               "row)",
               value(host[1]), position(host[1]), targets_vocab_, targets_vocab_);
}

}  // namespace cleave::ops::cuda_detail
