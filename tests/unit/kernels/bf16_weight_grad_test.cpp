// The weight gradients that read bf16 activations a row segment at a time (bias, LayerNorm, RMSNorm on every vector
// path) give the bits of their f32 kernels over the widened tensors, the path they replace (whole-tensor widening
// into f32 scratch), at 1 and 2 threads. Shapes: column counts that are not a multiple of the column block (256,
// 128) or a vector, a single row, and one large enough to be worth a team; the gradients start non-zero (+=); dy
// spans 24 binades, so that the f32 sums of its bf16 values round and an order change shows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/rmsnorm.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::bf16_weight_grad_test {
namespace {

struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{1, 7}, {5, 130}, {33, 300}, {300, 333}};

using test::random_bf16;
using test::widened;

TEST(KernelBf16WeightGradients, RowSegmentsGiveTheWidenedF32Bits) {
  double norm = 0.0;
  for (const Shape& s : kShapes) {
    const auto n = static_cast<size_t>(s.rows * s.cols), cols = static_cast<size_t>(s.cols);
    // dy over 24 binades, so that the sums of bf16 values (bias, dbeta) round: of one binade they add exactly in f32,
    // and a kernel that summed the rows in another order would pass (checked by reversing the row loop for bf16).
    const auto dy = test::random_bf16_spanning_binades(n, 61, 24, 2.0f), x = random_bf16(n, 62, 2.0f);
    const auto dy32 = widened(dy), x32 = widened(x);
    const auto mean = test::random_floats(static_cast<size_t>(s.rows), 63);
    const auto rstd = test::random_floats(static_cast<size_t>(s.rows), 64, 3.0f);
    const auto start = test::random_floats(cols, 65);  // gradients accumulate: start from non-zero values

    std::vector<float> bias_want = start, gamma_want = start, beta_want = start, rms_want = start;
    bias_backward(dy32.data(), bias_want.data(), s.rows, s.cols);
    layernorm_backward_weight(dy32.data(), x32.data(), mean.data(), rstd.data(), gamma_want.data(), beta_want.data(),
                              s.rows, s.cols);
    rmsnorm_backward_weight_isa(VectorIsa::kBaseline, dy32.data(), x32.data(), rstd.data(), rms_want.data(), s.rows,
                                s.cols);
    norm += test::l2_norm(bias_want) + test::l2_norm(gamma_want) + test::l2_norm(rms_want);

    test::for_each_thread_count({1, 2}, [&](int threads) {
      const std::string at = " [" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "] threads " +
                             std::to_string(threads);
      std::vector<float> bias = start, gamma = start, beta = start;
      bias_backward(dy.data(), bias.data(), s.rows, s.cols);
      layernorm_backward_weight(dy.data(), x.data(), mean.data(), rstd.data(), gamma.data(), beta.data(), s.rows,
                                s.cols);
      EXPECT_EQ(bias, bias_want) << "bias" << at;
      EXPECT_EQ(gamma, gamma_want) << "layernorm dgamma" << at;
      EXPECT_EQ(beta, beta_want) << "layernorm dbeta" << at;
      test::for_each_isa_path(test::kEveryIsaPath, [&](VectorIsa isa) {
        std::vector<float> rms = start;
        rmsnorm_backward_weight_isa(isa, dy.data(), x.data(), rstd.data(), rms.data(), s.rows, s.cols);
        EXPECT_EQ(rms, rms_want) << "rmsnorm dweight, " << test::isa_label(isa) << at;
      });
    });
  }
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace cleave::kernels::cpu::bf16_weight_grad_test
