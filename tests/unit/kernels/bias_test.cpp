// bias_add_forward / bias_backward against double references on odd shapes; backward accumulates (+=),
// so two calls give the initial value plus twice the column sums; a wide case exercises column blocking. Every
// instruction-set path and thread count gives the bits of the serial loop that sums each column in row order
// (f32 and bf16 dy, the bf16 values over 24 binades so that their sums round), on widths below, at and past the
// 64-column block.
#include "kernels/cpu/bias.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "kernel_test_util.hpp"
#include "kernels/cpu/parallel.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::bias_test {
namespace {

TEST(KernelBias, ForwardAddsBiasToEveryRow) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {65, 37}, {300, 257}}) {
    auto y = test::random_floats(static_cast<size_t>(rows * cols), 1);
    const auto bias = test::random_floats(static_cast<size_t>(cols), 2);
    std::vector<double> want(y.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = double(y[r * cols + c]) + bias[c];
    bias_add_forward(y.data(), bias.data(), rows, cols);
    test::expect_close(y, want, 1e-6, 1e-6, "bias forward");
    EXPECT_GT(test::l2_norm(y), 0.0);
  }
}

TEST(KernelBias, BackwardAccumulatesColumnSums) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {13, 7}, {37, 65}, {129, 600}}) {
    const auto dy = test::random_floats(static_cast<size_t>(rows * cols), 3);
    auto dbias = test::random_floats(static_cast<size_t>(cols), 4);
    const auto initial = dbias;
    std::vector<double> want(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0.0;
      for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + c];
      want[c] = initial[c] + 2.0 * s;
    }
    bias_backward(dy.data(), dbias.data(), rows, cols);
    bias_backward(dy.data(), dbias.data(), rows, cols);
    test::expect_close(dbias, want, 1e-4, 1e-5, "bias backward twice");
    EXPECT_GT(test::l2_norm(dbias), 0.0);
  }
}

// The serial loop the kernel's bits are defined by: column c's rows added in row order from +0, then added to dbias.
template <class T>
__attribute__((optimize("fp-contract=off"))) std::vector<float> row_order_sums(const std::vector<T>& dy,
                                                                                std::vector<float> dbias, int64_t rows,
                                                                                int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) {
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<T, float>) {
        acc += dy[r * cols + c];
      } else {
        acc += test::widened({dy[r * cols + c]})[0];
      }
    }
    dbias[c] += acc;
  }
  return dbias;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const std::pair<int64_t, int64_t> kAwkwardShapes[] = {{1, 1}, {3, 13}, {9, 63}, {17, 64}, {5, 65}, {300, 127},
                                                       {130, 256}, {520, 257}, {40, 1000}};

TEST(KernelBias, EveryIsaPathGivesTheRowOrderBits) {
  EXPECT_TRUE(vector_isa_available(VectorIsa::kBaseline));
  for (auto [rows, cols] : kAwkwardShapes) {
    auto dy = test::random_floats(static_cast<size_t>(rows * cols), 5, 3.0f);
    if (rows >= 3) {  // an infinity in one column and a NaN in another propagate the same way on every path
      dy[static_cast<size_t>(cols + cols - 1)] = std::numeric_limits<float>::infinity();
      dy[static_cast<size_t>(2 * cols)] = std::numeric_limits<float>::quiet_NaN();
    }
    // bf16 values over 24 binades: values of one binade (8 significant bits) add exactly in f32, and then no order of
    // the rows could be told from another (checked by reversing the kernel's row loop for bf16 dy).
    const auto dy16 = test::random_bf16_spanning_binades(static_cast<size_t>(rows * cols), 6, 24, 3.0f);
    const auto initial = test::random_floats(static_cast<size_t>(cols), 7);
    const auto want = row_order_sums(dy, initial, rows, cols);
    const auto want16 = row_order_sums(dy16, initial, rows, cols);
    auto y = test::random_floats(static_cast<size_t>(rows * cols), 8);
    const auto bias = test::random_floats(static_cast<size_t>(cols), 9);
    auto want_y = y;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want_y[r * cols + c] += bias[c];
    EXPECT_GT(test::l2_norm(want16), 0.0);
    test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
      const std::string what = test::isa_label(isa) + ", " + std::to_string(threads) + " threads, rows " +
                               std::to_string(rows) + ", cols " + std::to_string(cols);
      auto got = initial;
      bias_backward_isa(isa, dy.data(), got.data(), rows, cols);
      auto got16 = initial;
      bias_backward_isa(isa, dy16.data(), got16.data(), rows, cols);
      auto got_y = y;
      bias_add_forward_isa(isa, got_y.data(), bias.data(), rows, cols);
      EXPECT_TRUE(same_bits(got, want)) << "f32 dy, " << what;
      EXPECT_TRUE(same_bits(got16, want16)) << "bf16 dy, " << what;
      EXPECT_TRUE(same_bits(got_y, want_y)) << "forward, " << what;
    });
  }
}


// Operands over 41 binades (2^-20 to 2^20, either sign): values of one binade would mostly add exactly, and then no
// change in the order of the additions could be told apart.
std::vector<float> many_binades(size_t n, uint64_t seed) {
  return test::random_floats_spanning_binades(n, seed, 41, 0x1p21f);
}

// Gradients large enough that their column blocks are shared over the team (detail::worth_parallel_columns), odd and
// block-multiple widths, operands over many binades, an infinity and a NaN in dy: the bits of the row-order loop on
// every path at 1, 2 and 3 threads (the serial cases are EveryIsaPathGivesTheRowOrderBits').
TEST(KernelBias, TeamSharedBlocksGiveTheRowOrderBitsOverManyBinades) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2100, 1000}, {1030, 2049}}) {
    ASSERT_TRUE(detail::worth_parallel_columns(rows * cols)) << rows << " x " << cols << " would not use the team";
    auto dy = many_binades(static_cast<size_t>(rows * cols), 11);
    dy[static_cast<size_t>(5 * cols + 3)] = std::numeric_limits<float>::infinity();
    dy[static_cast<size_t>(7 * cols + cols - 1)] = std::numeric_limits<float>::quiet_NaN();
    const auto dy16 = test::narrowed(many_binades(dy.size(), 12));
    const auto initial = many_binades(static_cast<size_t>(cols), 13);
    const auto want = row_order_sums(dy, initial, rows, cols);
    const auto want16 = row_order_sums(test::widened(dy16), initial, rows, cols);
    EXPECT_TRUE(std::isinf(want[3]) && std::isnan(want[static_cast<size_t>(cols - 1)]));
    EXPECT_GT(test::l2_norm(want16), 0.0);
    test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
      const std::string what = test::isa_label(isa) + ", " + std::to_string(threads) + " threads, rows " +
                               std::to_string(rows) + ", cols " + std::to_string(cols);
      auto got = initial;
      bias_backward_isa(isa, dy.data(), got.data(), rows, cols);
      auto got16 = initial;
      bias_backward_isa(isa, dy16.data(), got16.data(), rows, cols);
      EXPECT_TRUE(same_bits(got, want)) << "f32 dy, " << what;
      EXPECT_TRUE(same_bits(got16, want16)) << "bf16 dy, " << what;
    });
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::bias_test
