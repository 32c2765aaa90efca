// SwiGLU kernels (swiglu.hpp): grid-stride loops, one element per thread per iteration. expf, not __expf: the
// build has no fast math, and the CPU twin uses std::exp. For gate < -88, exp(-gate) is +inf and sigmoid is
// exactly 0, so silu is -0 and its derivative 0, as on the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/swiglu.hpp"

namespace cleave::kernels::cuda::detail {
namespace {

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_kernel(ConstFloats gate, ConstFloats up, Floats h, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = load(gate, i);
    store(h, i, g * sigmoid(g) * load(up, i));
  }
}

__global__ void swiglu_backward_kernel(ConstFloats gate, ConstFloats up, ConstFloats dh, Floats dgate, Floats dup,
                                       int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float g = load(gate, i);
    const float s = sigmoid(g);
    const float d = load(dh, i);
    store(dup, i, d * g * s);
    store(dgate, i, d * load(up, i) * s * (1.0f + g * (1.0f - s)));
  }
}

}  // namespace

cudaError_t launch_swiglu_forward(ConstFloats gate, ConstFloats up, Floats h, int64_t n, cudaStream_t stream) {
  return launch_grid_stride(swiglu_forward_kernel, n, stream, gate, up, h, n);
}

cudaError_t launch_swiglu_backward(ConstFloats gate, ConstFloats up, ConstFloats dh, Floats dgate, Floats dup,
                                   int64_t n, cudaStream_t stream) {
  return launch_grid_stride(swiglu_backward_kernel, n, stream, gate, up, dh, dgate, dup, n);
}

}  // namespace cleave::kernels::cuda::detail
