// GELU kernels (gelu.hpp): the same formula as the CPU kernel, with CUDA's tanhf.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gelu.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

__global__ void gelu_forward_kernel(ConstFloats x, Floats y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = load(x, i);
    const float u = kSqrt2OverPi * (v + kCoeff * v * v * v);
    store(y, i, 0.5f * v * (1.0f + tanhf(u)));
  }
}

__global__ void gelu_backward_kernel(ConstFloats x, ConstFloats dy, Floats dx, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = load(x, i);
    const float u = kSqrt2OverPi * (v + kCoeff * v * v * v);
    const float t = tanhf(u);
    const float sech2 = 1.0f - t * t;
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * v * v);
    store(dx, i, load(dy, i) * (0.5f * (1.0f + t) + 0.5f * v * sech2 * du_dx));
  }
}

}  // namespace

cudaError_t launch_gelu_forward(ConstFloats x, Floats y, int64_t n, cudaStream_t stream) {
  return launch_grid_stride(gelu_forward_kernel, n, stream, x, y, n);
}

cudaError_t launch_gelu_backward(ConstFloats x, ConstFloats dy, Floats dx, int64_t n, cudaStream_t stream) {
  return launch_grid_stride(gelu_backward_kernel, n, stream, x, dy, dx, n);
}

}  // namespace cleave::kernels::cuda::detail
