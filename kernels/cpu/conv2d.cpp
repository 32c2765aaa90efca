// Conv2d via im2col + GEMM, one image at a time. See conv2d.hpp.
//
// For image n: col[C*k*k, OH*OW] = im2col(x_n); y_n[K, OH*OW] = W[K, C*k*k] col (+ bias).
// backward_input: col = W^T dy_n, then col2im scatters col back into dx_n (overlapping windows add).
// backward_weight: dW += dy_n col^T; dbias[k] += sum of dy_n[k, :]. Images are processed in order, so the
// accumulation order is fixed.
#include "kernels/cpu/conv2d.hpp"

#include "engine/core/error.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {
namespace {

void im2col(const Conv2dShape& s, const float* x, float* col) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel;
  const int64_t rows = s.in_channels * k * k;
  CLEAVE_PARALLEL_FOR(row, rows, detail::worth_parallel(rows * oh * ow),
    const int64_t c = row / (k * k), ki = (row / k) % k, kj = row % k;
    const float* plane = x + c * s.height * s.width;
    float* dst = col + row * oh * ow;
    for (int64_t y = 0; y < oh; ++y) {
      const int64_t ih = y * s.stride - s.padding + ki;
      float* out = dst + y * ow;
      if (ih < 0 || ih >= s.height) {
        for (int64_t xo = 0; xo < ow; ++xo) out[xo] = 0.0f;
        continue;
      }
      const float* in = plane + ih * s.width;
      for (int64_t xo = 0; xo < ow; ++xo) {
        const int64_t iw = xo * s.stride - s.padding + kj;
        out[xo] = (iw >= 0 && iw < s.width) ? in[iw] : 0.0f;
      }
    })
}

// dx_n += col2im(col); parallel over input channels (each owns its plane, so no write is shared).
void col2im_add(const Conv2dShape& s, const float* col, float* dx) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel;
  const bool parallel = s.in_channels > 1 && detail::worth_parallel(s.in_channels * k * k * oh * ow);
  CLEAVE_PARALLEL_FOR(c, s.in_channels, parallel,
    float* plane = dx + c * s.height * s.width;
    for (int64_t ki = 0; ki < k; ++ki) {
      for (int64_t kj = 0; kj < k; ++kj) {
        const float* src = col + ((c * k + ki) * k + kj) * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t ih = y * s.stride - s.padding + ki;
          if (ih < 0 || ih >= s.height) continue;
          float* row = plane + ih * s.width;
          for (int64_t xo = 0; xo < ow; ++xo) {
            const int64_t iw = xo * s.stride - s.padding + kj;
            if (iw >= 0 && iw < s.width) row[iw] += src[y * ow + xo];
          }
        }
      }
    })
}

}  // namespace

int64_t Conv2dShape::out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
int64_t Conv2dShape::out_width() const { return (width + 2 * padding - kernel) / stride + 1; }

void conv2d_check_shape(const Conv2dShape& s) {
  CLEAVE_CHECK(s.batch >= 0 && s.in_channels > 0 && s.out_channels > 0 && s.height > 0 && s.width > 0,
               "conv2d: sizes must be positive (batch {} >= 0, in_channels {}, out_channels {}, height {}, width {})",
               s.batch, s.in_channels, s.out_channels, s.height, s.width);
  CLEAVE_CHECK(s.kernel > 0 && s.stride > 0 && s.padding >= 0,
               "conv2d: kernel {} and stride {} must be > 0 and padding {} >= 0", s.kernel, s.stride, s.padding);
  CLEAVE_CHECK(s.height + 2 * s.padding >= s.kernel && s.width + 2 * s.padding >= s.kernel,
               "conv2d: kernel {} is larger than the padded input {}x{} (height {}, width {}, padding {})", s.kernel,
               s.height + 2 * s.padding, s.width + 2 * s.padding, s.height, s.width, s.padding);
}

int64_t conv2d_workspace_floats(const Conv2dShape& s) {
  conv2d_check_shape(s);
  return s.in_channels * s.kernel * s.kernel * s.out_height() * s.out_width();
}

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                    float* workspace, GemmSlicing slicing) {
  conv2d_check_shape(s);
  const int64_t ckk = s.in_channels * s.kernel * s.kernel;
  const int64_t spatial = s.out_height() * s.out_width();
  for (int64_t n = 0; n < s.batch; ++n) {
    im2col(s, x + n * s.in_channels * s.height * s.width, workspace);
    float* yn = y + n * s.out_channels * spatial;
    gemm(false, false, s.out_channels, spatial, ckk, 1.0f, w, ckk, workspace, spatial, 0.0f, yn, spatial, slicing);
    if (bias != nullptr) {
      for (int64_t k = 0; k < s.out_channels; ++k) {
        float* row = yn + k * spatial;
        const float b = bias[k];
#pragma omp simd
        for (int64_t i = 0; i < spatial; ++i) row[i] += b;
      }
    }
  }
}

void conv2d_backward_input(const Conv2dShape& s, const float* dy, const float* w, float* dx, float* workspace,
                           GemmSlicing slicing) {
  conv2d_check_shape(s);
  const int64_t ckk = s.in_channels * s.kernel * s.kernel;
  const int64_t spatial = s.out_height() * s.out_width();
  const int64_t image = s.in_channels * s.height * s.width;
  for (int64_t n = 0; n < s.batch; ++n) {
    gemm(true, false, ckk, spatial, s.out_channels, 1.0f, w, ckk, dy + n * s.out_channels * spatial, spatial, 0.0f,
         workspace, spatial, slicing);
    float* dxn = dx + n * image;
    for (int64_t i = 0; i < image; ++i) dxn[i] = 0.0f;
    col2im_add(s, workspace, dxn);
  }
}

void conv2d_backward_weight(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            float* workspace, GemmSlicing slicing) {
  conv2d_check_shape(s);
  const int64_t ckk = s.in_channels * s.kernel * s.kernel;
  const int64_t spatial = s.out_height() * s.out_width();
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* dyn = dy + n * s.out_channels * spatial;
    im2col(s, x + n * s.in_channels * s.height * s.width, workspace);
    gemm(false, true, s.out_channels, ckk, spatial, 1.0f, dyn, spatial, workspace, spatial, 1.0f, dw, ckk, slicing);
    if (dbias != nullptr) {
      for (int64_t k = 0; k < s.out_channels; ++k) {
        const float* row = dyn + k * spatial;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < spatial; ++i) acc += row[i];
        dbias[k] += acc;
      }
    }
  }
}

}  // namespace cleave::kernels::cpu
