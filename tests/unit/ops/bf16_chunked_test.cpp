// The CPU backend's chunked bf16 path (kernels/ops/cpu_chunked_view.hpp): every element-wise and row-wise op
// on bf16 tensors gives, bit for bit, what the whole-tensor reference gives (widen every input to f32, run the
// op on f32 tensors, narrow every output once), on awkward shapes (a single element, rows that do not divide
// the chunk, a row longer than a chunk, tensors large enough for the OpenMP path), at 1 and 2 threads, with
// mixed f32/bf16 operands; and a Linear's forward GEMM with bf16 operands and a bf16 C equals the f32-C GEMM
// plus the bias in f32, narrowed once.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::bf16_chunked_test {
namespace {

using cleave::kernels::test::random_floats_spanning_binades;
using test::like;
using test::tensor_of;

// Operands over many binades (kernel_test_util.hpp): of one binade, bf16 values (8 significant bits) and their
// products (16) mostly add exactly in f32, so a row sum or a GEMM's sum over k taken in another order on the chunked
// or epilogue path would still match. kSumBinades where values themselves are summed (layernorm's mean; the row ops
// take all their inputs so), kProductBinades per operand of the GEMM, whose sums are of products.
constexpr int kSumBinades = 24;
constexpr int kProductBinades = 12;
std::vector<float> spread(std::size_t n, std::uint64_t seed, int binades = kSumBinades, float scale = 1.0f) {
  return random_floats_spanning_binades(n, seed, binades, scale);
}

struct Shape2 {
  std::int64_t rows, cols;
};
// rows x cols: one element; odd small; rows that do not divide the 2,048-element chunk; a row longer than a
// chunk; parallel (>= 32K elements) with a partial last chunk; the small GPT's MLP activation.
const Shape2 kShapes[] = {{1, 1}, {3, 7}, {37, 29}, {2, 5000}, {301, 129}, {1024, 1024}};

// The tensor's values as f32 (exact for bf16).
Tensor widened(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  copy(Context{}, t, out);
  return out;
}

// The reference's output narrowed to `dtype`, as bits.
std::vector<float> narrowed(const Tensor& f32_out, DType dtype) {
  Tensor out = like(f32_out, dtype);
  copy(Context{}, f32_out, out);
  return out.to_floats();
}

// `got` is the reference's f32 output narrowed once to got's dtype, bit for bit.
void expect_same(const Tensor& got, const Tensor& want_f32, const std::string& what) {
  test::expect_same_floats(got.to_floats(), narrowed(want_f32, got.dtype()), what, /*single_may_be_zero=*/true);
}

class OpsBf16Chunked : public test::CpuThreadsTest {};

TEST_P(OpsBf16Chunked, ElementwiseOpsMatchTheWholeTensorReference) {
  const DType bf = DType::kBF16;
  for (const Shape2 s : kShapes) {
    const Shape shape{s.rows, s.cols};
    const auto n = static_cast<std::size_t>(s.rows * s.cols);
    const std::string at = " [" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "] threads " +
                           std::to_string(GetParam());
    const Tensor a = tensor_of(spread(n, 1, kSumBinades, 3.0f), shape, bf);
    const Tensor b = tensor_of(spread(n, 2, kSumBinades, 3.0f), shape, bf);
    const Tensor af = widened(a), bfv = widened(b);

    Tensor out = like(a, bf), want = like(af, DType::kF32);
    add(ctx_, a, b, out);
    add(ctx_, af, bfv, want);
    expect_same(out, want, "add" + at);

    // Mixed: an f32 operand and a bf16 one into an f32 output (read nowhere else).
    Tensor out32 = like(a, DType::kF32);
    add(ctx_, af, b, out32);
    expect_same(out32, want, "add f32+bf16" + at);

    Tensor y = tensor_of(spread(n, 3), shape, bf);
    Tensor yf = widened(y);
    add_inplace(ctx_, y, a);
    add_inplace(ctx_, yf, af);
    expect_same(y, yf, "add_inplace" + at);

    Tensor y2 = tensor_of(spread(n, 4), shape, bf);
    Tensor y2f = widened(y2);
    scale_inplace(ctx_, y2, -1.7f);
    scale_inplace(ctx_, y2f, -1.7f);
    expect_same(y2, y2f, "scale_inplace" + at);

    Tensor z = tensor_of(spread(n, 5), shape, bf);
    Tensor zf = widened(z);
    axpy(ctx_, 0.25f, a, z);
    axpy(ctx_, 0.25f, af, zf);
    expect_same(z, zf, "axpy" + at);

    Tensor g = like(a, bf), gf = like(af, DType::kF32);
    gelu_forward(ctx_, a, g);
    gelu_forward(ctx_, af, gf);
    expect_same(g, gf, "gelu_forward" + at);
    Tensor dg = like(a, bf), dgf = like(af, DType::kF32);
    gelu_backward(ctx_, a, b, dg);
    gelu_backward(ctx_, af, bfv, dgf);
    expect_same(dg, dgf, "gelu_backward" + at);

    Tensor r = like(a, bf), rf = like(af, DType::kF32);
    relu_forward(ctx_, a, r);
    relu_forward(ctx_, af, rf);
    expect_same(r, rf, "relu_forward" + at);

    Tensor h = like(a, bf), hf = like(af, DType::kF32);
    swiglu_forward(ctx_, a, b, h);
    swiglu_forward(ctx_, af, bfv, hf);
    expect_same(h, hf, "swiglu_forward" + at);
    const Tensor dh = tensor_of(spread(n, 6), shape, bf);
    Tensor dga = like(a, bf), dua = like(a, bf), dgaf = like(af, DType::kF32), duaf = like(af, DType::kF32);
    swiglu_backward(ctx_, a, b, dh, dga, dua);
    swiglu_backward(ctx_, af, bfv, widened(dh), dgaf, duaf);
    expect_same(dga, dgaf, "swiglu_backward dgate" + at);
    expect_same(dua, duaf, "swiglu_backward dup" + at);
  }
}

TEST_P(OpsBf16Chunked, RowOpsMatchTheWholeTensorReference) {
  const DType bf = DType::kBF16;
  for (const Shape2 s : kShapes) {
    const Shape shape{s.rows, s.cols};
    const auto n = static_cast<std::size_t>(s.rows * s.cols);
    const auto cols = static_cast<std::size_t>(s.cols);
    const std::string at = " [" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "] threads " +
                           std::to_string(GetParam());
    const Tensor x = tensor_of(spread(n, 11, kSumBinades, 2.0f), shape, bf), dy = tensor_of(spread(n, 12), shape, bf);
    const Tensor xf = widened(x), dyf = widened(dy);
    const Tensor gamma = tensor_of(spread(cols, 13), Shape{s.cols}, bf);
    const Tensor beta = tensor_of(spread(cols, 14), Shape{s.cols}, bf);
    auto stats = [&] { return Tensor::empty(Shape{s.rows}, DType::kF32, MemoryCategory::kActivations, cpu_allocator()); };

    Tensor bias_y = tensor_of(spread(n, 15), shape, bf);
    Tensor bias_yf = widened(bias_y);
    bias_add_forward(ctx_, bias_y, beta);
    bias_add_forward(ctx_, bias_yf, widened(beta));
    expect_same(bias_y, bias_yf, "bias_add_forward" + at);

    Tensor y = like(x, bf), yf = like(xf, DType::kF32);
    Tensor mean = stats(), rstd = stats(), meanf = stats(), rstdf = stats();
    layernorm_forward(ctx_, x, gamma, beta, y, mean, rstd, 1e-5f);
    layernorm_forward(ctx_, xf, widened(gamma), widened(beta), yf, meanf, rstdf, 1e-5f);
    expect_same(y, yf, "layernorm_forward" + at);
    EXPECT_EQ(mean.to_floats(), meanf.to_floats()) << "layernorm mean" << at;
    EXPECT_EQ(rstd.to_floats(), rstdf.to_floats()) << "layernorm rstd" << at;
    Tensor dx = like(x, bf), dxf = like(xf, DType::kF32);
    layernorm_backward_input(ctx_, dy, x, gamma, mean, rstd, dx);
    layernorm_backward_input(ctx_, dyf, xf, widened(gamma), meanf, rstdf, dxf);
    expect_same(dx, dxf, "layernorm_backward_input" + at);

    Tensor ry = like(x, bf), ryf = like(xf, DType::kF32);
    Tensor rr = stats(), rrf = stats();
    rmsnorm_forward(ctx_, x, gamma, ry, rr, 1e-6f);
    rmsnorm_forward(ctx_, xf, widened(gamma), ryf, rrf, 1e-6f);
    expect_same(ry, ryf, "rmsnorm_forward" + at);
    EXPECT_EQ(rr.to_floats(), rrf.to_floats()) << "rmsnorm rstd" << at;
    Tensor rdx = like(x, bf), rdxf = like(xf, DType::kF32);
    rmsnorm_backward_input(ctx_, dy, x, gamma, rr, rdx);
    rmsnorm_backward_input(ctx_, dyf, xf, widened(gamma), rrf, rdxf);
    expect_same(rdx, rdxf, "rmsnorm_backward_input" + at);
  }
}

// A Linear's forward under bf16: C = A B^T + bias with bf16 operands and a bf16 C, on the library device.blas
// "auto" picks (oneDNN's bf16 kernels where the CPU has them, else the widened path).
TEST_P(OpsBf16Chunked, LinearForwardAddsTheBiasInF32AndRoundsOnce) {
  const DType bf = DType::kBF16;
  for (const auto& [m, n, k] : {std::array<std::int64_t, 3>{1, 1, 1}, {37, 29, 53}, {1024, 1024, 256},
                                {3, 4099, 17}}) {
    const std::string at = fmt::format(" {}x{}x{} threads {}", m, n, k, GetParam());
    const Tensor a = tensor_of(spread(static_cast<std::size_t>(m * k), 21, kProductBinades), Shape{m, k}, bf);
    const Tensor w = tensor_of(spread(static_cast<std::size_t>(n * k), 22, kProductBinades), Shape{n, k}, bf);
    const Tensor bias = tensor_of(spread(static_cast<std::size_t>(n), 23, kSumBinades, 4.0f), Shape{n}, bf);
    GemmOptions plain;
    plain.trans_b = true;
    Tensor want = Tensor::empty(Shape{m, n}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    gemm(ctx_, a, w, want, plain);  // bf16 operands, f32 C: the product the epilogue starts from
    bias_add_forward(ctx_, want, widened(bias));
    GemmOptions with_bias = plain;
    with_bias.epilogue = GemmEpilogue::kBias;
    with_bias.bias = bias;
    Tensor got = Tensor::empty(Shape{m, n}, bf, MemoryCategory::kActivations, cpu_allocator());
    gemm(ctx_, a, w, got, with_bias);
    expect_same(got, want, "gemm + bias" + at);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, OpsBf16Chunked, ::testing::Values(1, 2));

}  // namespace
}  // namespace cleave::ops::bf16_chunked_test
