// Checked entry points for the max-pooling kernels (maxpool.hpp); kernels in maxpool.cu.
#include "kernels/cuda/maxpool.hpp"

#include <limits>

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {
namespace {

void check_pool(const char* op, const PoolShape& s) {
  CLEAVE_CHECK(s.batch >= 0 && s.channels > 0 && s.height > 0 && s.width > 0 && s.window > 0 && s.stride > 0,
               "{}: sizes must be positive (N {} >= 0, C {}, H {}, W {}, window {}, stride {})", op, s.batch,
               s.channels, s.height, s.width, s.window, s.stride);
  CLEAVE_CHECK(s.window <= s.height && s.window <= s.width, "{}: window {} is larger than the input {}x{}", op,
               s.window, s.height, s.width);
  CLEAVE_ASSERT(s.height * s.width <= std::numeric_limits<int32_t>::max(), "{}: plane {}x{} exceeds int32 argmax", op,
                s.height, s.width);
}

}  // namespace

void maxpool2d_forward(const void* x, void* y, FloatType type, int32_t* argmax, const PoolShape& shape,
                       cudaStream_t stream) {
  check_pool("maxpool2d_forward", shape);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_maxpool2d_forward(x, y, type, argmax, shape, stream),
                           "maxpool_forward_kernel");
}

void maxpool2d_backward(const void* dy, void* dx, FloatType type, const int32_t* argmax, const PoolShape& shape,
                        cudaStream_t stream) {
  check_pool("maxpool2d_backward", shape);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_maxpool2d_backward(dy, dx, type, argmax, shape, stream),
                           "maxpool_backward_kernel");
}

}  // namespace cleave::kernels::cuda
