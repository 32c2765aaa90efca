// The mixture-of-experts ops on the CPU: grouped GEMMs against one gemm per group on copies (groups of 0 rows
// included, which leave C untouched), a group's bits against the same group alone (gemm_many runs small groups whole,
// one per thread: what it does with a group must not depend on the others) and, in deterministic mode, against
// ops::gemm at 1 and 2 threads; moe_gather / moe_combine / moe_combine_weight_grad against loops in double, and the
// seam's checks of the groups.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"

namespace cleave::ops {
namespace {

Tensor random(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  rng::fill_normal(t.data<float>(), t.numel(), seed, 7, 0.0f, 1.0f);
  return t;
}

Tensor ints(const std::vector<std::int32_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kI32, MemoryCategory::kActivations, cpu_allocator());
  for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int32_t>()[i] = v[i];
  return t;
}

TEST(MoeOps, GroupedGemmIsOneGemmPerGroup) {
  const Context ctx;
  const std::vector<std::int64_t> groups = {2, 0, 3, 1};
  const std::int64_t rows = 6, k = 5, n = 4, g = 4;
  const Tensor a = random({rows, k}, 1), b = random({g, n, k}, 2);
  const Tensor c = random({rows, n}, 3);
  GroupedGemmOptions opt;
  opt.trans_b = true;
  opt.beta = 1.0f;
  const auto before = c.to_floats();
  grouped_gemm(ctx, a, b, c, groups, opt);
  const auto got = c.to_floats();
  std::int64_t first = 0;
  for (std::int64_t e = 0; e < g; ++e) {
    for (std::int64_t r = first; r < first + groups[static_cast<std::size_t>(e)]; ++r) {
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = before[static_cast<std::size_t>(r * n + j)];
        for (std::int64_t i = 0; i < k; ++i) acc += double(a.data<float>()[r * k + i]) * b.data<float>()[(e * n + j) * k + i];
        EXPECT_NEAR(got[static_cast<std::size_t>(r * n + j)], acc, 1e-5);
      }
    }
    first += groups[static_cast<std::size_t>(e)];
  }
  // The weight gradient: C[e] += A_e^T B_e; an empty group's C stays as it was.
  const Tensor da = random({rows, n}, 4);
  const Tensor dw = random({g, n, k}, 5);
  const auto dw_before = dw.to_floats();
  GroupedGemmOptions acc;
  acc.beta = 1.0f;
  grouped_gemm_weight_grad(ctx, da, a, dw, groups, acc);
  const auto dw_got = dw.to_floats();
  first = 0;
  for (std::int64_t e = 0; e < g; ++e) {
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t i = 0; i < k; ++i) {
        double s = dw_before[static_cast<std::size_t>((e * n + j) * k + i)];
        for (std::int64_t r = first; r < first + groups[static_cast<std::size_t>(e)]; ++r)
          s += double(da.data<float>()[r * n + j]) * a.data<float>()[r * k + i];
        EXPECT_NEAR(dw_got[static_cast<std::size_t>((e * n + j) * k + i)], s, 1e-5);
      }
    first += groups[static_cast<std::size_t>(e)];
  }
  const std::vector<std::int64_t> wrong = {2, 0, 3, 2};
  EXPECT_THROW(grouped_gemm(ctx, a, b, c, wrong, opt), Error);
}

// Rows [first, first + rows) of a [rows, cols] tensor's floats.
std::vector<float> rows_of(const Tensor& t, std::int64_t first, std::int64_t rows) {
  const std::int64_t cols = t.shape().last();
  const auto all = t.to_floats();
  return {all.begin() + first * cols, all.begin() + (first + rows) * cols};
}

// Groups large enough that the gemm slot alone slices them at 2 threads (m·n·k over 1 M), with an empty one.
TEST(MoeOps, GroupedGemmGroupBitsDependOnTheGroupAlone) {
  const std::vector<std::int64_t> groups = {200, 0, 300, 40};
  const std::int64_t rows = 540, k = 96, n = 80, g = 4;
  const Tensor a = random({rows, k}, 11), b = random({g, n, k}, 12), dc = random({rows, n}, 13);
  const int saved = omp_get_max_threads();
  for (const GemmMode mode : {GemmMode::kFast, GemmMode::kDeterministic}) {
    Context ctx;
    ctx.gemm_mode = mode;
    std::vector<float> reference_c, reference_w;  // deterministic mode: the 1-thread results
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      const std::string at = std::string(mode == GemmMode::kFast ? "fast" : "deterministic") + " mode, threads " +
                             std::to_string(threads);
      GroupedGemmOptions nt;
      nt.trans_b = true;
      const Tensor c = random({rows, n}, 14);
      grouped_gemm(ctx, a, b, c, groups, nt);
      const Tensor w = random({g, n, k}, 15);
      grouped_gemm_weight_grad(ctx, dc, a, w, groups, {});
      std::int64_t first = 0;
      for (std::int64_t e = 0; e < g; ++e) {
        const std::int64_t r = groups[static_cast<std::size_t>(e)];
        if (r > 0) {
          const Tensor alone = random({r, n}, 16), alone_w = random({1, n, k}, 17);
          const std::vector<std::int64_t> one = {r};
          grouped_gemm(ctx, a.slice(first, first + r), b.slice(e, e + 1), alone, one, nt);
          grouped_gemm_weight_grad(ctx, dc.slice(first, first + r), a.slice(first, first + r), alone_w, one, {});
          EXPECT_TRUE(kernels::test::same_bits(rows_of(c, first, r), alone.to_floats())) << at << ", group " << e;
          EXPECT_TRUE(kernels::test::same_bits(w.slice(e, e + 1).to_floats(), alone_w.to_floats())) << at << ", group " << e;
          if (mode == GemmMode::kDeterministic) {  // the seam's contract: gemm()'s determinism
            const Tensor via_gemm = random({r, n}, 18);
            GemmOptions gemm_nt;
            gemm_nt.trans_b = true;
            gemm(ctx, a.slice(first, first + r), b.slice(e, e + 1).view(Shape{n, k}), via_gemm, gemm_nt);
            EXPECT_TRUE(kernels::test::same_bits(rows_of(c, first, r), via_gemm.to_floats())) << at << ", group " << e;
          }
        }
        first += r;
      }
      if (mode == GemmMode::kDeterministic) {
        if (threads == 1) {
          reference_c = c.to_floats();
          reference_w = w.to_floats();
        } else {
          EXPECT_TRUE(kernels::test::same_bits(c.to_floats(), reference_c)) << at;
          EXPECT_TRUE(kernels::test::same_bits(w.to_floats(), reference_w)) << at;
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

TEST(MoeOps, GatherCombineAndWeightGrad) {
  const Context ctx;
  const std::int64_t n = 3, k = 2, d = 4, r = n * k;
  const Tensor x = random({n, d}, 8);
  const Tensor index = ints({0, 2, 1, 0, 2, 1}, {r});
  const Tensor scale = random({r}, 9);
  const Tensor out = Tensor::empty({r, d}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  moe_gather(ctx, x, index, scale, out);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t c = 0; c < d; ++c)
      EXPECT_FLOAT_EQ(out.data<float>()[i * d + c],
                      scale.data<float>()[i] * x.data<float>()[index.data<std::int32_t>()[i] * d + c]);
  const Tensor rows = ints({0, 3, 2, 5, 1, 4}, {n, k});
  const Tensor weight = random({n, k}, 10);
  const Tensor y = Tensor::empty({n, d}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  moe_combine(ctx, out, rows, weight, y);
  const Tensor dy = random({n, d}, 11);
  const Tensor dw = Tensor::empty({n, k}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  moe_combine_weight_grad(ctx, dy, out, rows, dw);
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t c = 0; c < d; ++c) {
      double s = 0;
      for (std::int64_t j = 0; j < k; ++j)
        s += double(weight.data<float>()[t * k + j]) * out.data<float>()[rows.data<std::int32_t>()[t * k + j] * d + c];
      EXPECT_NEAR(y.data<float>()[t * d + c], s, 1e-5);
    }
    for (std::int64_t j = 0; j < k; ++j) {
      double s = 0;
      for (std::int64_t c = 0; c < d; ++c)
        s += double(dy.data<float>()[t * d + c]) * out.data<float>()[rows.data<std::int32_t>()[t * k + j] * d + c];
      EXPECT_NEAR(dw.data<float>()[t * k + j], s, 1e-5);
    }
  }
}

}  // namespace
}  // namespace cleave::ops
