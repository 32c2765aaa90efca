// Tensor construction, views and host-side helpers. Host pointers are touched only for CPU storage; zero_ goes
// through the owning allocator, so a device tensor is zeroed on the device (its allocator's stream). Copies
// between devices go through ops::transfer (kernels/ops/ops.hpp).
#include "engine/core/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace cleave {

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryCategory category, Allocator& allocator) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = allocator.allocate(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype), category);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemoryCategory category, Allocator& allocator) {
  Tensor t = empty(shape, dtype, category, allocator);
  t.zero_();
  return t;
}

Tensor Tensor::from_floats(std::span<const float> values, const Shape& shape, MemoryCategory category) {
  CLEAVE_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(), "from_floats: {} values for shape {}",
               values.size(), shape.str());
  Tensor t = empty(shape, DType::kF32, category, cpu_allocator());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

MemoryCategory Tensor::category() const {
  CLEAVE_ASSERT(defined(), "category() of an undefined tensor");
  return storage_->category();
}

void* Tensor::raw_data() const {
  CLEAVE_ASSERT(defined(), "data() of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}

Tensor Tensor::view(const Shape& shape) const {
  CLEAVE_ASSERT(shape.numel() == numel(), "view {} of tensor {}: element counts differ", shape.str(), shape_.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  CLEAVE_ASSERT(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [{}, {}) of tensor {}", begin,
                end, shape_.str());
  Tensor t = *this;
  const std::int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.offset_ += static_cast<std::size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone(MemoryCategory category) const {
  CLEAVE_ASSERT(device().is_cpu(), "Tensor::clone on {} belongs to the CUDA backend", device().str());
  Tensor t = empty(shape_, dtype_, category, cpu_allocator());
  t.copy_from(*this);
  return t;
}

void Tensor::zero_() const {
  CLEAVE_ASSERT(defined(), "zero_ of an undefined tensor");
  storage_->owner().zero_bytes(raw_data(), nbytes());
}

void Tensor::fill_(float value) const {
  if (value == 0.0f && !std::signbit(value)) return zero_();  // +0 is all-zero bits: device-safe
  CLEAVE_ASSERT(device().is_cpu(), "Tensor::fill_({}) on {}: use ops::fill on the tensor's stream", value,
                device().str());
  auto s = span<float>();
  std::fill(s.begin(), s.end(), value);
}

void Tensor::copy_from(const Tensor& src) const {
  CLEAVE_ASSERT(src.numel() == numel() && src.dtype() == dtype_, "copy {} {} into {} {}", src.shape().str(),
                dtype_name(src.dtype()), shape_.str(), dtype_name(dtype_));
  CLEAVE_ASSERT(device().is_cpu() && src.device().is_cpu(), "Tensor::copy_from between {} and {}",
                src.device().str(), device().str());
  if (raw_data() != src.raw_data()) std::memmove(raw_data(), src.raw_data(), nbytes());
}

std::vector<float> Tensor::to_floats() const {
  CLEAVE_ASSERT(device().is_cpu(), "to_floats on {}", device().str());
  std::vector<float> out(static_cast<std::size_t>(numel()));
  if (dtype_ == DType::kF32) {
    std::memcpy(out.data(), raw_data(), nbytes());
  } else if (dtype_ == DType::kBF16) {
    const auto* p = static_cast<const std::uint16_t*>(raw_data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(p[i]);
  } else {
    CLEAVE_ASSERT(false, "to_floats of a {} tensor", dtype_name(dtype_));
  }
  return out;
}

}  // namespace cleave
