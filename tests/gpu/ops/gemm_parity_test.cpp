// Seam parity of ops::gemm on cuda:0 against the CPU backend: the four transpose combinations on shapes off every
// alignment (1x1x1, 7x33x5, 65x17x129), f32 -> f32, bf16 -> bf16 and bf16 -> f32, beta 0 and beta != 0, the bias
// epilogue, and a batch of 3 with a broadcast B. Also: a GEMM takes no scratch from the run's allocator (the
// device's one cuBLASLt workspace lives in its CudaResources).
//
// Tolerances (relative to each element plus the tensor's scale, parity_util.hpp): f32 output 1e-5 (strict f32
// products, TF32 off, summed in another order over k <= 129 terms); bf16 inputs with f32 output 1e-5 (bf16
// products are exact in f32, only the order differs); bf16 output 8e-3 (those ulps may flip the one final
// rounding: one bf16 ulp, 2^-8 relative).
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::gemm_parity_test {
namespace {

struct GemmCase {
  std::int64_t m, n, k;
};
const GemmCase kShapes[] = {{1, 1, 1}, {7, 33, 5}, {65, 17, 129}};

struct Types {
  DType in, out;
};
const Types kTypes[] = {{DType::kF32, DType::kF32}, {DType::kBF16, DType::kBF16}, {DType::kBF16, DType::kF32}};

std::string label(const GemmCase& s, const Types& t, bool ta, bool tb, std::string_view extra) {
  return "gemm " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " " +
         std::string(dtype_name(t.in)) + "->" + std::string(dtype_name(t.out)) + (ta ? " T" : " N") + (tb ? "T" : "N") +
         " " + std::string(extra);
}

double tolerance(const Types& t) { return t.out == DType::kBF16 ? 8e-3 : 1e-5; }

ops::GemmOptions options(bool ta, bool tb, float alpha, float beta = 0.0f, std::int64_t batch = 1) {
  ops::GemmOptions o;
  o.trans_a = ta;
  o.trans_b = tb;
  o.alpha = alpha;
  o.beta = beta;
  o.batch = batch;
  return o;
}

using GemmParity = OpsParity;

TEST_F(GemmParity, TransposesBetaAndBiasMatchCpu) {
  for (const Types& types : kTypes) {
    for (const GemmCase& s : kShapes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const Tensor a = random(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, types.in);
          const Tensor b = random(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, types.in);
          const Tensor gpu_a = to_gpu(a), gpu_b = to_gpu(b);

          Tensor c = empty_cpu(Shape{s.m, s.n}, types.out);
          ops::gemm(cpu(), a, b, c, options(ta, tb, 0.75f));
          Tensor gpu_c = poisoned_gpu(Shape{s.m, s.n}, types.out);  // beta 0 must not read the NaNs
          ops::gemm(gpu(), gpu_a, gpu_b, gpu_c, options(ta, tb, 0.75f));
          expect_close(c, gpu_c, tolerance(types), label(s, types, ta, tb, "beta 0"));

          Tensor c2 = random(Shape{s.m, s.n}, types.out);
          Tensor gpu_c2 = to_gpu(c2);
          const Tensor bias = random(Shape{s.n}, types.out);
          ops::GemmOptions with_bias = options(ta, tb, -1.25f, 0.5f);
          with_bias.epilogue = ops::GemmEpilogue::kBias;
          with_bias.bias = bias;
          ops::gemm(cpu(), a, b, c2, with_bias);
          ops::GemmOptions gpu_bias = with_bias;
          gpu_bias.bias = to_gpu(bias);
          ops::gemm(gpu(), gpu_a, gpu_b, gpu_c2, gpu_bias);
          expect_close(c2, gpu_c2, tolerance(types), label(s, types, ta, tb, "beta 0.5 + bias"));
        }
      }
    }
  }
}

TEST_F(GemmParity, BatchWithBroadcastOperandMatchesCpu) {
  for (const Types& types : kTypes) {
    const std::int64_t batch = 3, m = 17, n = 9, k = 33;
    const Tensor a = random(Shape{batch, m, k}, types.in);
    const Tensor b = random(Shape{k, n}, types.in);  // rank 2: one matrix for every entry
    Tensor c = empty_cpu(Shape{batch, m, n}, types.out);
    ops::gemm(cpu(), a, b, c, options(false, false, 1.0f, 0.0f, batch));
    Tensor gpu_c = poisoned_gpu(Shape{batch, m, n}, types.out);
    ops::gemm(gpu(), to_gpu(a), to_gpu(b), gpu_c, options(false, false, 1.0f, 0.0f, batch));
    expect_close(c, gpu_c, tolerance(types),
                 "gemm batch 3 broadcast B " + std::string(dtype_name(types.in)) + "->" +
                     std::string(dtype_name(types.out)));
  }
}

TEST_F(GemmParity, TakesNoScratchFromTheRunAllocator) {
  const Tensor a = to_gpu(random(Shape{64, 96}, DType::kBF16)), b = to_gpu(random(Shape{96, 80}, DType::kBF16));
  Tensor c = poisoned_gpu(Shape{64, 80}, DType::kF32);
  gpu().allocator->reset_peak();
  const std::int64_t before = gpu().allocator->stats().peak_of(MemoryCategory::kWorkspace);
  for (int i = 0; i < 3; ++i) ops::gemm(gpu(), a, b, c);
  EXPECT_EQ(gpu().allocator->stats().peak_of(MemoryCategory::kWorkspace), before)
      << "a GEMM took workspace from the run's allocator (the cuBLASLt workspace belongs to CudaResources)";
}

}  // namespace
}  // namespace cleave::testing::gemm_parity_test
