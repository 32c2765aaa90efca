// The convolution kernels' shape (kernels/cpu/conv2d.hpp, kernels/cuda/conv2d.hpp: the same fields, one struct per
// device) filled from the seam's tensors, once for both backends. Each backend then checks it against its own limits
// (conv2d_check_shape) before any work.
#pragma once

#include "kernels/ops/backend.hpp"

namespace cleave::ops {

// x [N, C, H, W] (or dx), weight [C', C, k, k] (or dweight).
template <class Conv2dShape>
Conv2dShape conv2d_shape_of(const Tensor& x, const Tensor& weight, const Conv2dParams& params) {
  Conv2dShape s;
  s.batch = x.dim(0);
  s.in_channels = x.dim(1);
  s.height = x.dim(2);
  s.width = x.dim(3);
  s.out_channels = weight.dim(0);
  s.kernel = weight.dim(2);
  s.stride = params.stride;
  s.padding = params.padding;
  return s;
}

}  // namespace cleave::ops
