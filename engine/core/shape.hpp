// Shape: the extents of a contiguous row-major tensor (up to 8 dimensions, stored inline, no allocation).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace cleave {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i < 0 ? i + rank_ : i)]; }
  std::int64_t& operator[](int i) { return dims_[static_cast<std::size_t>(i < 0 ? i + rank_ : i)]; }
  std::int64_t numel() const;
  // Product of all dimensions but the last: the number of "rows" a row-wise kernel sees.
  std::int64_t rows() const { return rank_ == 0 ? 1 : numel() / dims_[static_cast<std::size_t>(rank_ - 1)]; }
  std::int64_t last() const { return rank_ == 0 ? 1 : dims_[static_cast<std::size_t>(rank_ - 1)]; }
  std::span<const std::int64_t> dims() const { return {dims_.data(), static_cast<std::size_t>(rank_)}; }

  Shape with_dim(int i, std::int64_t extent) const;  // copy with dimension i replaced
  std::string str() const;                            // "[8,64,256]"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<std::int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

}  // namespace cleave
