// The mixture-of-experts ops on the CPU: grouped GEMMs against one gemm per group on copies (groups of 0 rows
// included, which leave C untouched), a group's bits against the same group alone (the grouped_gemm slot runs small
// groups whole, one per thread: what it does with a group must not depend on the others) and, in deterministic
// mode, at 1 and 2 threads; a run's grouped GEMMs over steps of changing row counts make their oneDNN primitives and
// grow their kernel scratch in the first step only (issue 33); moe_gather / moe_combine / moe_combine_weight_grad
// against loops in double, their bf16 and mixed-dtype forms against the f32 kernel on the widened inputs (bit for
// bit), and the seam's checks of the groups.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/rng.hpp"
#include "kernels/ops/cpu/cpu_resources.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"

namespace cleave::ops::moe_ops_test {
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

// A run's MoE GEMMs (forward, input gradient, weight gradient accumulated with beta 1) over steps whose groups hold
// different row counts, as routing makes them: each checked against a double reference; the oneDNN primitives are
// made in the first step only, one per GEMM layout (3), whatever the row counts (issue 33: one per row count before),
// and the kernel scratch (the slot's per-group rows and order) grows in the first step only.
TEST(MoeOps, GroupedGemmsMakeNoPrimitivePerRowCount) {
  if (!cpu_blas_built(CpuBlas::kOneDnn)) GTEST_SKIP() << "onednn is not built into this cleave";
  const std::unique_ptr<DeviceResources> resources = make_device_resources(Device::cpu());
  auto& cpu = dynamic_cast<cpu_detail::CpuResources&>(*resources);
  Context ctx;
  ctx.cpu_blas = CpuBlas::kOneDnn;
  ctx.resources = resources.get();
  const std::int64_t g = 4, rows = 96, k = 24, n = 16;
  const Tensor b = random({g, n, k}, 30);
  std::size_t primitives = 0, growths = 0;
  for (std::int64_t step = 0; step < 6; ++step) {
    std::vector<std::int64_t> groups = {5 + 7 * step, 0, 40 - 6 * step, 0};
    groups[3] = rows - groups[0] - groups[2];
    const Tensor x = random({rows, k}, 31 + static_cast<std::uint64_t>(step));
    const Tensor dy = random({rows, n}, 41 + static_cast<std::uint64_t>(step));
    const Tensor y = random({rows, n}, 51), dx = random({rows, k}, 52);
    const Tensor dw = random({g, n, k}, 53);
    const auto dw0 = dw.to_floats();
    GroupedGemmOptions nt;
    nt.trans_b = true;
    grouped_gemm(ctx, x, b, y, groups, nt);  // y_g = x_g W_g^T
    grouped_gemm(ctx, dy, b, dx, groups);    // dx_g = dy_g W_g
    GroupedGemmOptions acc;
    acc.beta = 1.0f;
    grouped_gemm_weight_grad(ctx, dy, x, dw, groups, acc);  // dW_g += dy_g^T x_g
    std::int64_t first = 0;
    double norm = 0;
    for (std::int64_t e = 0; e < g; ++e) {
      const std::int64_t last = first + groups[static_cast<std::size_t>(e)];
      for (std::int64_t r = first; r < last; ++r) {
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::int64_t i = 0; i < k; ++i) {
            s += double(x.data<float>()[r * k + i]) * b.data<float>()[(e * n + j) * k + i];
          }
          EXPECT_NEAR(y.data<float>()[r * n + j], s, 1e-4) << "step " << step << ", forward row " << r;
          norm += s * s;
        }
        for (std::int64_t i = 0; i < k; ++i) {
          double s = 0;
          for (std::int64_t j = 0; j < n; ++j) {
            s += double(dy.data<float>()[r * n + j]) * b.data<float>()[(e * n + j) * k + i];
          }
          EXPECT_NEAR(dx.data<float>()[r * k + i], s, 1e-4) << "step " << step << ", input gradient row " << r;
        }
      }
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t i = 0; i < k; ++i) {
          const std::size_t at = static_cast<std::size_t>((e * n + j) * k + i);
          double s = dw0[at];
          for (std::int64_t r = first; r < last; ++r) {
            s += double(dy.data<float>()[r * n + j]) * x.data<float>()[r * k + i];
          }
          EXPECT_NEAR(dw.data<float>()[at], s, 1e-4) << "step " << step << ", expert " << e;
        }
      }
      first = last;
    }
    EXPECT_GT(norm, 0.0);
    if (step == 0) {
      primitives = cpu.onednn().primitives();
      growths = cpu.scratch().growths();
      EXPECT_EQ(primitives, 3u) << "one primitive per GEMM layout (forward, input gradient, weight gradient)";
    } else {
      EXPECT_EQ(cpu.onednn().primitives(), primitives) << "step " << step << " made a primitive for its row counts";
      EXPECT_EQ(cpu.scratch().growths(), growths) << "step " << step << " grew the kernel scratch";
    }
  }
}

Tensor as_bf16(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::kBF16, MemoryCategory::kActivations, cpu_allocator());
  copy(Context{}, t, out);
  return out;
}

// f32 values of a tensor of either dtype.
std::vector<float> floats_of(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t.to_floats();
  Tensor f = Tensor::empty(t.shape(), DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  copy(Context{}, t, f);
  return f.to_floats();
}

// bf16 and mixed operands are converted a row at a time in the kernels: the bits of the f32 kernel on the widened
// inputs, each output narrowed once (through a run's kernel scratch and without one; sizes that go parallel).
TEST(MoeOps, Bf16RoutingGivesTheBitsOfF32OnTheWidenedInputs) {
  const std::unique_ptr<DeviceResources> resources = make_device_resources(Device::cpu());
  Context run;
  run.resources = resources.get();
  const std::int64_t tokens = 256, top_k = 2, d = 130, r = tokens * top_k;  // d: a ragged vector tail
  std::vector<std::int32_t> index_v(static_cast<std::size_t>(r)), rows_v(static_cast<std::size_t>(r));
  for (std::int64_t i = 0; i < r; ++i) {
    index_v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37) % tokens);
    rows_v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 53 + 11) % r);
  }
  const Tensor index = ints(index_v, {r}), rows = ints(rows_v, {tokens, top_k});
  const Tensor scale = random({r}, 60), weight = random({tokens, top_k}, 61);
  // src and dy over 11 binades, so that the weight gradient's f32 sums of bf16 x bf16 products round (of one binade
  // they mostly add exactly, and a bf16 path that added them in another order would pass; checked by swapping two adds
  // of the AVX-512 bf16 x bf16 loop).
  const auto spread = [](const Shape& shape, std::uint64_t seed) {
    return Tensor::from_floats(kernels::test::random_floats_spanning_binades(static_cast<std::size_t>(shape.numel()),
                                                                            seed, 11),
                               shape);
  };
  const Tensor x16 = as_bf16(random({tokens, d}, 62)), src16 = as_bf16(spread({r, d}, 63));
  const Tensor dy16 = as_bf16(spread({tokens, d}, 64));
  const Tensor x = Tensor::from_floats(floats_of(x16), {tokens, d});
  const Tensor src = Tensor::from_floats(floats_of(src16), {r, d});
  const Tensor dy = Tensor::from_floats(floats_of(dy16), {tokens, d});
  const Context bare;
  // The f32 kernels on the widened inputs, outputs narrowed once.
  const Tensor gathered = Tensor::empty({r, d}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  moe_gather(bare, x, index, scale, gathered);
  const Tensor combined = Tensor::empty({tokens, d}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  moe_combine(bare, src, rows, weight, combined);
  const Tensor dweight = Tensor::empty({tokens, top_k}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  moe_combine_weight_grad(bare, dy, src, rows, dweight);
  EXPECT_GT(kernels::test::l2_norm(combined.to_floats()), 0.0);
  for (const Context* ctx : std::initializer_list<const Context*>{&bare, &run}) {
    const std::string with = ctx->resources != nullptr ? "with the run's scratch" : "without resources";
    for (const DType out_dtype : {DType::kF32, DType::kBF16}) {
      for (const bool in16 : {false, true}) {
        if (!in16 && out_dtype == DType::kF32) continue;  // the f32 reference itself
        const std::string what =
            with + (in16 ? ", bf16 in, " : ", f32 in, ") + std::string(dtype_name(out_dtype)) + " out";
        const Tensor g = Tensor::empty({r, d}, out_dtype, MemoryCategory::kActivations, cpu_allocator());
        moe_gather(*ctx, in16 ? x16 : x, index, scale, g);
        const Tensor want_g = out_dtype == DType::kBF16 ? as_bf16(gathered) : gathered;
        EXPECT_TRUE(kernels::test::same_bits(floats_of(g), floats_of(want_g))) << "moe_gather, " << what;
        const Tensor c = Tensor::empty({tokens, d}, out_dtype, MemoryCategory::kActivations, cpu_allocator());
        moe_combine(*ctx, in16 ? src16 : src, rows, weight, c);
        const Tensor want_c = out_dtype == DType::kBF16 ? as_bf16(combined) : combined;
        EXPECT_TRUE(kernels::test::same_bits(floats_of(c), floats_of(want_c))) << "moe_combine, " << what;
      }
    }
    for (const bool dy_16 : {false, true}) {
      for (const bool src_16 : {false, true}) {
        if (!dy_16 && !src_16) continue;
        const Tensor dw = Tensor::empty({tokens, top_k}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
        moe_combine_weight_grad(*ctx, dy_16 ? dy16 : dy, src_16 ? src16 : src, rows, dw);
        EXPECT_TRUE(kernels::test::same_bits(dw.to_floats(), dweight.to_floats()))
            << "moe_combine_weight_grad, " << with << ", dy " << (dy_16 ? "bf16" : "f32") << ", src "
            << (src_16 ? "bf16" : "f32");
      }
    }
  }
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
}  // namespace cleave::ops::moe_ops_test
