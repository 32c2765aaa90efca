// Shape (shape.hpp): construction, element count, one extent replaced, the printed form "[2,3]", equality.
// Invariant: a Shape has at most kMaxDims extents, each >= 0 (checked at construction); extents past rank() are
// never read.
#include "engine/core/shape.hpp"

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave {

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  CLEAVE_ASSERT(dims.size() <= kMaxDims, "shape rank {} exceeds {}", dims.size(), kMaxDims);
  rank_ = static_cast<int>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    CLEAVE_ASSERT(dims[i] >= 0, "negative extent {} in dimension {}", dims[i], i);
    dims_[i] = dims[i];
  }
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

Shape Shape::with_dim(int i, std::int64_t extent) const {
  Shape out = *this;
  out[i] = extent;
  return out;
}

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims(), ",")); }

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a.dims_[static_cast<std::size_t>(i)] != b.dims_[static_cast<std::size_t>(i)]) return false;
  }
  return true;
}

}  // namespace cleave
