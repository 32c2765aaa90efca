// Flatten (flatten.hpp): forward and backward are views of the input and of dy, never copies; the per-sample shape
// fixed at construction restores dy's shape, so nothing is stashed (the stash is cleared both ways).
#include "layers/flatten.hpp"

#include <vector>

#include "engine/core/error.hpp"

namespace cleave::layers {

Tensor Flatten::forward(const Tensor& x, Stash& stash, Context& ctx) {
  (void)ctx;
  CLEAVE_CHECK(x.defined() && x.rank() == sample_.rank() + 1 && x.numel() == x.dim(0) * sample_.numel(),
               "flatten: expected [batch] + {}, got {}", sample_.str(), x.defined() ? x.shape().str() : "undefined");
  stash.clear();
  return x.view(Shape{x.dim(0), sample_.numel()});
}

Tensor Flatten::backward_input(const Tensor& dy, Stash& stash, Context& ctx) {
  (void)ctx;
  stash.clear();
  CLEAVE_ASSERT(dy.rank() >= 1 && dy.numel() == dy.dim(0) * sample_.numel(), "flatten: dy {} for sample shape {}",
                dy.shape().str(), sample_.str());
  std::vector<std::int64_t> dims{dy.dim(0)};
  for (auto d : sample_.dims()) dims.push_back(d);
  return dy.view(Shape(std::span<const std::int64_t>(dims)));
}

}  // namespace cleave::layers
