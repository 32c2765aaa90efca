// Conv2d (im2col + GEMM) against a direct double convolution: forward with and without bias, input
// gradient (dx overwritten), weight and bias gradients (+=, twice gives twice), finite differences of the
// forward in x and w, workspace size, and shape errors. Shapes cover stride 2, padding, 1x1 and a kernel
// as large as the input.
#include "kernels/cpu/conv2d.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.hpp"

namespace cleave::kernels::cpu::conv2d_test {
namespace {

struct Ref {
  std::vector<double> y, dx, dw, dbias;
};

Ref reference(const Conv2dShape& s, const std::vector<float>& x, const std::vector<float>& w,
              const std::vector<float>& bias, const std::vector<float>& dy) {
  const int64_t OH = s.out_height(), OW = s.out_width(), k = s.kernel;
  Ref r;
  r.y.assign(static_cast<size_t>(s.batch * s.out_channels * OH * OW), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  r.dbias.assign(static_cast<size_t>(s.out_channels), 0.0);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t ko = 0; ko < s.out_channels; ++ko)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const size_t yi = static_cast<size_t>(((n * s.out_channels + ko) * OH + oh) * OW + ow);
          double acc = bias[ko];
          r.dbias[ko] += dy[yi];
          for (int64_t c = 0; c < s.in_channels; ++c)
            for (int64_t i = 0; i < k; ++i)
              for (int64_t j = 0; j < k; ++j) {
                const int64_t ih = oh * s.stride - s.padding + i, iw = ow * s.stride - s.padding + j;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                const size_t xi = static_cast<size_t>(((n * s.in_channels + c) * s.height + ih) * s.width + iw);
                const size_t wi = static_cast<size_t>(((ko * s.in_channels + c) * k + i) * k + j);
                acc += double(w[wi]) * x[xi];
                r.dx[xi] += double(dy[yi]) * w[wi];
                r.dw[wi] += double(dy[yi]) * x[xi];
              }
          r.y[yi] = acc;
        }
  return r;
}

class KernelConv2d : public ::testing::TestWithParam<Conv2dShape> {};

TEST_P(KernelConv2d, MatchesDirectConvolution) {
  const Conv2dShape s = GetParam();
  const int64_t k = s.kernel;
  auto x = test::random_floats(static_cast<size_t>(s.batch * s.in_channels * s.height * s.width), 90);
  auto w = test::random_floats(static_cast<size_t>(s.out_channels * s.in_channels * k * k), 91);
  const auto bias = test::random_floats(static_cast<size_t>(s.out_channels), 92);
  const size_t y_size = static_cast<size_t>(s.batch * s.out_channels * s.out_height() * s.out_width());
  const auto dy = test::random_floats(y_size, 93);
  const Ref ref = reference(s, x, w, bias, dy);
  ASSERT_EQ(conv2d_workspace_floats(s), s.in_channels * k * k * s.out_height() * s.out_width());
  std::vector<float> ws(static_cast<size_t>(conv2d_workspace_floats(s)));

  auto y = test::poisoned(y_size);
  conv2d_forward(s, x.data(), w.data(), bias.data(), y.data(), ws.data());
  test::expect_close(y, ref.y, 1e-5, 1e-5, "y");
  EXPECT_GT(test::l2_norm(y), 0.0);

  auto y_nobias = test::poisoned(y_size);
  conv2d_forward(s, x.data(), w.data(), nullptr, y_nobias.data(), ws.data());
  const int64_t spatial = s.out_height() * s.out_width();
  for (size_t i = 0; i < y_size; ++i) {
    const int64_t ko = (static_cast<int64_t>(i) / spatial) % s.out_channels;
    ASSERT_NEAR(y_nobias[i], ref.y[i] - bias[ko], 1e-5 * (1.0 + std::fabs(ref.y[i])));
  }

  auto dx = test::poisoned(x.size());
  conv2d_backward_input(s, dy.data(), w.data(), dx.data(), ws.data());
  test::expect_close(dx, ref.dx, 1e-5, 1e-5, "dx");
  EXPECT_GT(test::l2_norm(dx), 0.0);

  auto dw = test::random_floats(w.size(), 94);
  auto dbias = test::random_floats(bias.size(), 95);
  std::vector<double> want_dw(dw.size()), want_dbias(dbias.size());
  for (size_t i = 0; i < dw.size(); ++i) want_dw[i] = dw[i] + 2.0 * ref.dw[i];
  for (size_t i = 0; i < dbias.size(); ++i) want_dbias[i] = dbias[i] + 2.0 * ref.dbias[i];
  conv2d_backward_weight(s, x.data(), dy.data(), dw.data(), dbias.data(), ws.data());
  conv2d_backward_weight(s, x.data(), dy.data(), dw.data(), dbias.data(), ws.data());
  test::expect_close(dw, want_dw, 1e-4, 1e-5, "dw accumulated twice");
  test::expect_close(dbias, want_dbias, 1e-4, 1e-5, "dbias accumulated twice");
  auto dw_only = test::random_floats(w.size(), 96);
  const auto dw_only0 = dw_only;
  conv2d_backward_weight(s, x.data(), dy.data(), dw_only.data(), nullptr, ws.data());  // dbias may be null
  for (size_t i = 0; i < dw_only.size(); ++i)
    ASSERT_NEAR(dw_only[i], dw_only0[i] + ref.dw[i], 1e-4 * (1 + std::fabs(ref.dw[i])));

  // Finite differences of L = sum(dy * conv(x, w)) in x and w (a sample of elements).
  std::vector<float> y_fd(y_size);
  auto loss = [&] {
    conv2d_forward(s, x.data(), w.data(), bias.data(), y_fd.data(), ws.data());
    double l = 0.0;
    for (size_t i = 0; i < y_size; ++i) l += double(dy[i]) * y_fd[i];
    return l;
  };
  for (size_t i = 0; i < x.size(); i += 1 + x.size() / 10) {
    const double fd = test::finite_difference(x, i, 1e-2f, loss);
    EXPECT_NEAR(dx[i], fd, 2e-3 * (1.0 + std::fabs(fd))) << "x element " << i;
  }
  for (size_t i = 0; i < w.size(); i += 1 + w.size() / 10) {
    const double fd = test::finite_difference(w, i, 1e-2f, loss);
    EXPECT_NEAR(ref.dw[i], fd, 2e-3 * (1.0 + std::fabs(fd))) << "w element " << i;
  }
}

Conv2dShape shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t ko, int64_t k, int64_t stride, int64_t pad) {
  Conv2dShape s;
  s.batch = n;
  s.in_channels = c;
  s.height = h;
  s.width = w;
  s.out_channels = ko;
  s.kernel = k;
  s.stride = stride;
  s.padding = pad;
  return s;
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelConv2d,
                         ::testing::Values(shape(2, 3, 7, 9, 4, 3, 2, 1), shape(1, 1, 5, 5, 1, 5, 1, 0),
                                           shape(3, 2, 6, 5, 5, 1, 1, 0), shape(2, 4, 13, 11, 6, 3, 1, 2),
                                           shape(1, 3, 28, 28, 8, 5, 1, 2)));

TEST(KernelConv2dShape, BadShapesThrow) {
  EXPECT_THROW(conv2d_workspace_floats(shape(1, 1, 3, 3, 1, 5, 1, 0)), Error);  // kernel larger than input
  EXPECT_THROW(conv2d_workspace_floats(shape(1, 1, 3, 3, 1, 3, 0, 0)), Error);  // stride 0
  EXPECT_THROW(conv2d_workspace_floats(shape(1, 0, 3, 3, 1, 3, 1, 0)), Error);  // no channels
  EXPECT_EQ(shape(1, 1, 3, 3, 1, 5, 1, 1).out_height(), 1);                     // padding makes it fit
}

}  // namespace
}  // namespace cleave::kernels::cpu::conv2d_test
