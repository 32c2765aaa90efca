// Seam parity of the mixture-of-experts ops (ops::grouped_gemm, grouped_gemm_weight_grad, moe_gather,
// moe_combine, moe_combine_weight_grad) on cuda:0 against the CPU backend, f32 and bf16: groups of 0 rows
// (skipped, C left as it was), a group holding every row, uneven groups; gather with and without scales; a
// combine whose rows come from every expert; no tokens and every expert empty. Skips without a device
// (parity_util.hpp). Compiled, not run on a GPU yet.
//
// Tolerances: the grouped GEMMs are the backend's gemm per group (gemm_parity_test.cpp's 1e-5 relative to the
// tensor's scale for f32 sums of up to 64 terms); gather, combine and the weight gradient are the CPU's bits
// (tolerance 0): one multiply, or products rounded and added in the CPU's order with no FMA (kernels/cuda/moe.cu; the
// weight gradient's dots in the CPU's vector lanes, kernels/cuda/moe_dot_order.hpp, checked on the CPU by
// CudaMoeDotOrder in unit_cuda).
#include <vector>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::moe_parity_test {
namespace {

using MoeParity = OpsParity;

double tolerance(DType dtype, double f32_tol) { return dtype == DType::kBF16 ? 8e-3 : f32_tol; }

TEST_F(MoeParity, GroupedGemmsMatchCpu) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const std::vector<std::int64_t>& groups :
         {std::vector<std::int64_t>{3, 0, 5, 1}, std::vector<std::int64_t>{0, 9, 0, 0}, std::vector<std::int64_t>{1, 2, 3, 4}}) {
      std::int64_t rows = 0;
      for (auto g : groups) rows += g;
      const auto e = static_cast<std::int64_t>(groups.size());
      const std::int64_t k = 37, n = 24;
      const std::string what = std::string(dtype_name(dtype)) + " rows " + std::to_string(rows);
      const Tensor a = random(Shape{rows, k}, dtype), b = random(Shape{e, n, k}, dtype);
      Tensor c = random(Shape{rows, n}, dtype);
      Tensor gpu_c = to_gpu(c);
      ops::GroupedGemmOptions bt;
      bt.trans_b = true;
      bt.beta = 1.0f;
      ops::grouped_gemm(cpu(), a, b, c, groups, bt);
      ops::grouped_gemm(gpu(), to_gpu(a), to_gpu(b), gpu_c, groups, bt);
      expect_close(c, gpu_c, tolerance(dtype, 1e-5), "grouped_gemm " + what);

      const Tensor dy = random(Shape{rows, n}, dtype);
      Tensor dw = random(Shape{e, n, k}, DType::kF32);
      Tensor gpu_dw = to_gpu(dw);
      ops::GroupedGemmOptions acc;
      acc.beta = 1.0f;
      ops::grouped_gemm_weight_grad(cpu(), dy, a, dw, groups, acc);
      ops::grouped_gemm_weight_grad(gpu(), to_gpu(dy), to_gpu(a), gpu_dw, groups, acc);
      expect_close(dw, gpu_dw, 1e-5, "grouped_gemm_weight_grad " + what);
    }
  }
}

TEST_F(MoeParity, GatherCombineAndWeightGradMatchCpu) {
  const std::int64_t n = 257, k = 3, d = 65, r = n * k;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const std::string what(dtype_name(dtype));
    const Tensor x = random(Shape{n, d}, dtype);
    const Tensor index = random(Shape{r}, DType::kI32, 0, static_cast<float>(n - 1));
    const Tensor scale = random(Shape{r}, DType::kF32, 0.1f, 1.0f);
    for (bool scaled : {false, true}) {
      Tensor out = empty_cpu(Shape{r, d}, dtype);
      Tensor gpu_out = poisoned_gpu(Shape{r, d}, dtype);
      ops::moe_gather(cpu(), x, index, scaled ? scale : Tensor(), out);
      ops::moe_gather(gpu(), to_gpu(x), to_gpu(index), scaled ? to_gpu(scale) : Tensor(), gpu_out);
      expect_close(out, gpu_out, 0.0, std::string("moe_gather ") + (scaled ? "scaled " : "") + what);
    }
    const Tensor src = random(Shape{r, d}, dtype);
    const Tensor rows = random(Shape{n, k}, DType::kI32, 0, static_cast<float>(r - 1));
    const Tensor weight = random(Shape{n, k}, DType::kF32);
    Tensor y = empty_cpu(Shape{n, d}, dtype);
    Tensor gpu_y = poisoned_gpu(Shape{n, d}, dtype);
    ops::moe_combine(cpu(), src, rows, weight, y);
    ops::moe_combine(gpu(), to_gpu(src), to_gpu(rows), to_gpu(weight), gpu_y);
    expect_close(y, gpu_y, 0.0, "moe_combine " + what);
    const Tensor dy = random(Shape{n, d}, dtype);
    Tensor dw = empty_cpu(Shape{n, k}, DType::kF32);
    Tensor gpu_dw = poisoned_gpu(Shape{n, k}, DType::kF32);
    ops::moe_combine_weight_grad(cpu(), dy, src, rows, dw);
    ops::moe_combine_weight_grad(gpu(), to_gpu(dy), to_gpu(src), to_gpu(rows), gpu_dw);
    expect_close(dw, gpu_dw, 0.0, "moe_combine_weight_grad " + what);
  }
}

// The combine at its edges, bit for bit: one slot (k 1), one column, a width past the 256-thread blocks, every slot
// of a token on one row, and no weights (the backward's combine of the input gradients).
TEST_F(MoeParity, CombineIsTheCpusBits) {
  struct Case {
    std::int64_t n, k, d;
    bool weighted, same_row;
  };
  for (const Case& c : {Case{7, 1, 1, true, false}, Case{33, 4, 1, true, true}, Case{5, 8, 300, true, false},
                        Case{19, 3, 257, false, false}, Case{64, 2, 6, false, true}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::string what = std::string(dtype_name(dtype)) + " n " + std::to_string(c.n) + " k " +
                               std::to_string(c.k) + " d " + std::to_string(c.d) + (c.weighted ? "" : " unweighted") +
                               (c.same_row ? " one row per token" : "");
      const std::int64_t r = c.n * c.k;
      const Tensor src = random(Shape{r, c.d}, dtype);
      Tensor rows = random(Shape{c.n, c.k}, DType::kI32, 0, static_cast<float>(r - 1));
      if (c.same_row) {
        auto* p = rows.data<std::int32_t>();
        for (std::int64_t t = 0; t < c.n; ++t) {
          for (std::int64_t j = 1; j < c.k; ++j) p[t * c.k + j] = p[t * c.k];
        }
      }
      const Tensor weight = c.weighted ? random(Shape{c.n, c.k}, DType::kF32) : Tensor();
      Tensor y = empty_cpu(Shape{c.n, c.d}, dtype);
      Tensor gpu_y = poisoned_gpu(Shape{c.n, c.d}, dtype);
      ops::moe_combine(cpu(), src, rows, weight, y);
      ops::moe_combine(gpu(), to_gpu(src), to_gpu(rows), c.weighted ? to_gpu(weight) : Tensor(), gpu_y);
      expect_close(y, gpu_y, 0.0, "moe_combine " + what);
    }
  }
}

// The weight gradient's warp tiles at their edges: fewer outputs than a warp, a width of one column, a partial
// last tile and a width over several 32-column chunks with a partial last chunk; and the CPU twin's vector lanes
// (kernels/cuda/moe_dot_order.hpp): widths below one vector, tails of 1 to 7 columns after whole vectors of 4 and 8,
// a tail in a last chunk of 31 columns; bit for bit.
TEST_F(MoeParity, CombineWeightGradIsTheCpusBits) {
  struct Case {
    std::int64_t n, k, d;
  };
  for (const Case& c : {Case{5, 2, 1}, Case{11, 3, 32}, Case{40, 4, 300}, Case{257, 2, 1025}, Case{9, 2, 3},
                        Case{17, 3, 7}, Case{33, 2, 63}, Case{12, 5, 70}, Case{70, 2, 4099}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::string what = std::string(dtype_name(dtype)) + " n " + std::to_string(c.n) + " k " +
                               std::to_string(c.k) + " d " + std::to_string(c.d);
      const std::int64_t r = c.n * c.k;
      const Tensor src = random(Shape{r, c.d}, dtype);
      const Tensor rows = random(Shape{c.n, c.k}, DType::kI32, 0, static_cast<float>(r - 1));
      const Tensor dy = random(Shape{c.n, c.d}, dtype);
      Tensor dw = empty_cpu(Shape{c.n, c.k}, DType::kF32);
      Tensor gpu_dw = poisoned_gpu(Shape{c.n, c.k}, DType::kF32);
      ops::moe_combine_weight_grad(cpu(), dy, src, rows, dw);
      ops::moe_combine_weight_grad(gpu(), to_gpu(dy), to_gpu(src), to_gpu(rows), gpu_dw);
      expect_close(dw, gpu_dw, 0.0, "moe_combine_weight_grad " + what);
    }
  }
}

// An expert-parallel rank can receive no rows at all, and a micro-batch can route no tokens to an expert: the
// grouped GEMMs with every group empty leave C as it was (the weight gradient keeps its accumulated value), and the
// routing ops on 0 tokens or 0 routed rows launch nothing and leave no CUDA error behind for the next launch.
TEST_F(MoeParity, NoTokensAndEmptyExpertsChangeNothing) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const std::string what(dtype_name(dtype));
    const std::vector<std::int64_t> groups{0, 0, 0};
    const std::int64_t e = 3, k = 24, n = 40;
    const Tensor a = random(Shape{0, k}, dtype), dy = random(Shape{0, n}, dtype);
    const Tensor b = random(Shape{e, n, k}, dtype);
    Tensor c = random(Shape{0, n}, dtype);
    Tensor gpu_c = to_gpu(c);
    ops::GroupedGemmOptions bt;
    bt.trans_b = true;
    ASSERT_NO_THROW(ops::grouped_gemm(gpu(), to_gpu(a), to_gpu(b), gpu_c, groups, bt)) << what;
    Tensor dw = random(Shape{e, n, k}, DType::kF32);
    Tensor gpu_dw = to_gpu(dw);
    ops::GroupedGemmOptions acc;
    acc.beta = 1.0f;
    ops::grouped_gemm_weight_grad(cpu(), dy, a, dw, groups, acc);
    ops::grouped_gemm_weight_grad(gpu(), to_gpu(dy), to_gpu(a), gpu_dw, groups, acc);
    expect_close(dw, gpu_dw, 0.0, "grouped_gemm_weight_grad with every group empty " + what);

    const std::int64_t d = 33, top_k = 2;
    const Tensor x = random(Shape{5, d}, dtype);
    const Tensor no_index = random(Shape{0}, DType::kI32, 0, 4);
    ASSERT_NO_THROW(ops::moe_gather(gpu(), to_gpu(x), to_gpu(no_index), Tensor(), poisoned_gpu(Shape{0, d}, dtype)))
        << what;
    const Tensor src = random(Shape{0, d}, dtype);
    const Tensor no_rows = random(Shape{0, top_k}, DType::kI32, 0, 0);
    const Tensor no_weight = random(Shape{0, top_k}, DType::kF32);
    ASSERT_NO_THROW(ops::moe_combine(gpu(), to_gpu(src), to_gpu(no_rows), to_gpu(no_weight),
                                     poisoned_gpu(Shape{0, d}, dtype)))
        << what;
    ASSERT_NO_THROW(ops::moe_combine_weight_grad(gpu(), to_gpu(random(Shape{0, d}, dtype)), to_gpu(src),
                                                 to_gpu(no_rows), poisoned_gpu(Shape{0, top_k}, DType::kF32)))
        << what;
    // Nothing left pending: the next launch (a real gather) reports its own status and gives the CPU's bits.
    const Tensor index = random(Shape{7}, DType::kI32, 0, 4);
    Tensor out = empty_cpu(Shape{7, d}, dtype);
    Tensor gpu_out = poisoned_gpu(Shape{7, d}, dtype);
    ops::moe_gather(cpu(), x, index, Tensor(), out);
    ops::moe_gather(gpu(), to_gpu(x), to_gpu(index), Tensor(), gpu_out);
    expect_close(out, gpu_out, 0.0, "moe_gather after the empty calls " + what);
  }
}

}  // namespace
}  // namespace cleave::testing::moe_parity_test
