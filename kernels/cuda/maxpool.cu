// Max-pooling kernels (maxpool.hpp): one thread per output element forward, one per input element backward
// (a gather over the outputs whose window covers it, so no two threads write one element).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/float_io.cuh"
#include "kernels/cuda/maxpool.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

template <typename T>
__global__ void maxpool_forward_kernel(const T* x, T* y, int32_t* argmax, PoolShape s, int64_t oh, int64_t ow) {
  const int64_t n = s.batch * s.channels * oh * ow;
  for (int64_t o = global_thread(); o < n; o += grid_threads()) {
    const int64_t plane = o / (oh * ow);
    const int64_t i = (o / ow) % oh;
    const int64_t j = o % ow;
    const T* in = x + plane * s.height * s.width;
    int64_t best = (i * s.stride) * s.width + j * s.stride;
    float best_value = load(in, best);
    for (int64_t di = 0; di < s.window; ++di) {
      for (int64_t dj = 0; dj < s.window; ++dj) {
        const int64_t idx = (i * s.stride + di) * s.width + (j * s.stride + dj);
        const float v = load(in, idx);
        if (v > best_value) {  // strict: ties keep the first in row-major order
          best_value = v;
          best = idx;
        }
      }
    }
    store(y, o, best_value);
    argmax[o] = static_cast<int32_t>(best);
  }
}

template <typename T>
__global__ void maxpool_backward_kernel(const T* dy, T* dx, const int32_t* argmax, PoolShape s, int64_t oh,
                                        int64_t ow) {
  const int64_t n = s.batch * s.channels * s.height * s.width;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t plane = e / (s.height * s.width);
    const int64_t flat = e % (s.height * s.width);
    const int64_t h = flat / s.width;
    const int64_t w = flat % s.width;
    // Outputs (i, j) whose window covers (h, w): i*stride <= h < i*stride + window.
    const int64_t i_lo = h >= s.window ? (h - s.window) / s.stride + 1 : 0;
    const int64_t i_hi = h / s.stride < oh - 1 ? h / s.stride : oh - 1;
    const int64_t j_lo = w >= s.window ? (w - s.window) / s.stride + 1 : 0;
    const int64_t j_hi = w / s.stride < ow - 1 ? w / s.stride : ow - 1;
    const int64_t base = plane * oh * ow;
    float acc = 0.0f;
    for (int64_t i = i_lo; i <= i_hi; ++i) {
      for (int64_t j = j_lo; j <= j_hi; ++j) {
        const int64_t o = base + i * ow + j;
        if (argmax[o] == flat) acc += load(dy, o);
      }
    }
    store(dx, e, acc);
  }
}

}  // namespace

cudaError_t launch_maxpool2d_forward(const void* x, void* y, FloatType type, int32_t* argmax, const PoolShape& shape,
                                     cudaStream_t stream) {
  const int64_t oh = shape.out_height(), ow = shape.out_width();
  const int64_t n = shape.batch * shape.channels * oh * ow;
  return with_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    return launch_grid_stride(maxpool_forward_kernel<T>, n, stream, static_cast<const T*>(x), static_cast<T*>(y),
                              argmax, shape, oh, ow);
  });
}

cudaError_t launch_maxpool2d_backward(const void* dy, void* dx, FloatType type, const int32_t* argmax,
                                      const PoolShape& shape, cudaStream_t stream) {
  const int64_t oh = shape.out_height(), ow = shape.out_width();
  const int64_t n = shape.batch * shape.channels * shape.height * shape.width;
  return with_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    return launch_grid_stride(maxpool_backward_kernel<T>, n, stream, static_cast<const T*>(dy), static_cast<T*>(dx),
                              argmax, shape, oh, ow);
  });
}

}  // namespace cleave::kernels::cuda::detail
