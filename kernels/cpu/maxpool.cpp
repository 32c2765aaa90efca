// 2-D max pooling with saved argmax. See maxpool.hpp. Planes (n, c) are independent: parallel over them,
// and the backward scatter stays inside a plane, so no write is shared between threads.
#include "kernels/cpu/maxpool.hpp"

#include <limits>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {
namespace {

void check_pool(const char* op, int64_t N, int64_t C, int64_t H, int64_t W, int64_t window, int64_t stride) {
  CLEAVE_CHECK(N >= 0 && C > 0 && H > 0 && W > 0 && window > 0 && stride > 0,
               "{}: sizes must be positive (N {} >= 0, C {}, H {}, W {}, window {}, stride {})", op, N, C, H, W, window,
               stride);
  CLEAVE_CHECK(window <= H && window <= W, "{}: window {} is larger than the input {}x{}", op, window, H, W);
  CLEAVE_ASSERT(H * W <= std::numeric_limits<int32_t>::max(), "{}: plane {}x{} exceeds int32 argmax", op, H, W);
}

}  // namespace

void maxpool2d_forward(const float* x, float* y, int32_t* argmax, int64_t N, int64_t C, int64_t H, int64_t W,
                       int64_t window, int64_t stride) {
  check_pool("maxpool2d_forward", N, C, H, W, window, stride);
  const int64_t oh = (H - window) / stride + 1, ow = (W - window) / stride + 1;
  CLEAVE_PARALLEL_FOR(plane, N * C, detail::worth_parallel(N * C * H * W),
    const float* in = x + plane * H * W;
    float* out = y + plane * oh * ow;
    int32_t* arg = argmax + plane * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        int64_t best = (i * stride) * W + j * stride;
        float best_value = in[best];
        for (int64_t di = 0; di < window; ++di) {
          for (int64_t dj = 0; dj < window; ++dj) {
            const int64_t idx = (i * stride + di) * W + (j * stride + dj);
            if (in[idx] > best_value) {  // strict: ties keep the first in row-major order
              best_value = in[idx];
              best = idx;
            }
          }
        }
        out[i * ow + j] = best_value;
        arg[i * ow + j] = static_cast<int32_t>(best);
      }
    })
}

void maxpool2d_backward(const float* dy, const int32_t* argmax, float* dx, int64_t N, int64_t C, int64_t H, int64_t W,
                        int64_t window, int64_t stride) {
  check_pool("maxpool2d_backward", N, C, H, W, window, stride);
  const int64_t oh = (H - window) / stride + 1, ow = (W - window) / stride + 1;
  // Validated serially: an exception must not leave an OpenMP region.
  for (int64_t i = 0; i < N * C * oh * ow; ++i) {
    CLEAVE_ASSERT(argmax[i] >= 0 && argmax[i] < H * W,
                  "maxpool2d_backward: argmax {} at output {} is outside the "
                  "{}x{} plane (not produced by maxpool2d_forward with this shape)",
                  argmax[i], i, H, W);
  }
  CLEAVE_PARALLEL_FOR(plane, N * C, detail::worth_parallel(N * C * H * W),
    float* grad = dx + plane * H * W;
    for (int64_t i = 0; i < H * W; ++i) grad[i] = 0.0f;
    const float* g = dy + plane * oh * ow;
    const int32_t* arg = argmax + plane * oh * ow;
    for (int64_t i = 0; i < oh * ow; ++i) grad[arg[i]] += g[i];)
}

}  // namespace cleave::kernels::cpu
