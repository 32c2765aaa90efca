// Tensor: a contiguous, row-major view into shared Storage from a device allocator. No autograd.
//
// Views (reshape, slice along dim 0) share storage and cost nothing; clone() copies. data<T>() checks the
// dtype and the device so a kernel cannot silently read the wrong thing. A default-constructed Tensor is
// "undefined" (no storage).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/allocator.hpp"
#include "engine/core/dtype.hpp"
#include "engine/core/error.hpp"
#include "engine/core/shape.hpp"

namespace cleave {

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, MemoryCategory category, Allocator& allocator);
  static Tensor zeros(const Shape& shape, DType dtype, MemoryCategory category, Allocator& allocator);
  // CPU f32 tensor holding a copy of `values` (values.size() must equal shape.numel()).
  static Tensor from_floats(std::span<const float> values, const Shape& shape,
                            MemoryCategory category = MemoryCategory::kActivations);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank(); }
  DType dtype() const { return dtype_; }
  Device device() const;
  MemoryCategory category() const;
  std::int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  void* raw_data() const;
  template <typename T>
  T* data() const {
    CLEAVE_ASSERT(dtype_of<T>() == dtype_, "tensor {} holds {}, accessed as {}", shape_.str(), dtype_name(dtype_),
                  dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  std::span<T> span() const {
    return {data<T>(), static_cast<std::size_t>(numel())};
  }

  Tensor view(const Shape& shape) const;                       // same numel, shares storage
  Tensor slice(std::int64_t begin, std::int64_t end) const;    // rows [begin, end) of dim 0, shares storage
  Tensor clone(MemoryCategory category) const;                 // deep copy (same device)

  void zero_() const;                       // any device: through the owning allocator (its stream on a GPU)
  void fill_(float value) const;            // f32 CPU tensors; +0 on any device (as zero_)
  void copy_from(const Tensor& src) const;  // same numel and dtype; CPU<->CPU here, CUDA copies in cuda/
  std::vector<float> to_floats() const;     // CPU f32/bf16 tensor -> host vector

  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;  // bytes from storage start
  Shape shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace cleave
