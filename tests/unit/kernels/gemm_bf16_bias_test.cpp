// gemm_bf16's bias epilogue (oneDNN's bias argument; issue 39: the bf16 forward of a Linear in one pass over C).
// Asserts, where this build has oneDNN with a bf16 matmul on this CPU (skipped otherwise, saying why):
//  - C = op(A) op(B) + bias against a double reference on bf16-rounded operands, into f32 and bf16 C, every
//    transpose, padded leading dimensions (padding untouched), shapes below and above the slicing threshold;
//  - the same bits as the two-pass path it replaces (the product into f32 C, the bias added in f32, C rounded
//    once), so switching the Linear's forward to the epilogue changes no result;
//  - GemmSlicing::kShapeFixed gives the same bits at 1 and 2 OpenMP threads (the deterministic contract), and a
//    batched product adds the bias to every entry; k = 0 gives C = bias.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "kernels/cpu/cast.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/onednn_matmuls.hpp"

namespace cleave::kernels::cpu::gemm_bf16_bias_test {
namespace {

#define SKIP_UNLESS_BF16_ONEDNN()                                                                         \
  if (!gemm_backend_built(GemmBackend::kOneDnn) || !onednn_bf16_supported()) {                           \
    GTEST_SKIP() << "oneDNN is not built into this cleave, or has no bf16 matmul on this CPU (needs AVX-512)"; \
  }

std::vector<std::uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<std::uint16_t> bits(v.size());
  cast_f32_to_bf16(v.data(), bits.data(), static_cast<int64_t>(v.size()));
  return bits;
}
std::vector<float> widen(const std::vector<std::uint16_t>& bits) {
  std::vector<float> v(bits.size());
  cast_bf16_to_f32(bits.data(), v.data(), static_cast<int64_t>(v.size()));
  return v;
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
};

// Operands of one case (bf16 bit patterns, padded leading dimensions), the bias, and the double reference.
struct Problem {
  Case s;
  int64_t lda, ldb, ldc;
  std::vector<std::uint16_t> a, b;
  std::vector<float> bias;
  std::vector<double> want, scale;
  mutable OneDnnMatmuls matmuls;  // the run state oneDNN's calls keep

  Problem(const Case& c, int seed) : s(c) {
    lda = (c.ta ? c.m : c.k) + 3;
    ldb = (c.tb ? c.k : c.n) + 1;
    ldc = c.n + 2;
    a = bf16_bits(test::random_floats(static_cast<size_t>((c.ta ? c.k : c.m) * lda), 10 + seed));
    b = bf16_bits(test::random_floats(static_cast<size_t>((c.tb ? c.n : c.k) * ldb), 20 + seed));
    bias = test::random_floats(static_cast<size_t>(c.n), 30 + seed, 2.0f);
    const auto af = widen(a), bf = widen(b);
    want.assign(static_cast<size_t>(c.m * ldc), 0.0);
    scale = want;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = bias[static_cast<size_t>(j)], mag = std::fabs(acc);
        for (int64_t p = 0; p < c.k; ++p) {
          const double prod = static_cast<double>(c.ta ? af[p * lda + i] : af[i * lda + p]) *
                              static_cast<double>(c.tb ? bf[j * ldb + p] : bf[p * ldb + j]);
          acc += prod;
          mag += std::fabs(prod);
        }
        want[static_cast<size_t>(i * ldc + j)] = acc;
        scale[static_cast<size_t>(i * ldc + j)] = mag;
      }
    }
  }

  std::string name() const {
    return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + (s.ta ? " A^T" : "") +
           (s.tb ? " B^T" : "");
  }

  // C (as floats; padding past n is 7.25) through the epilogue, or through the two-pass path it replaces.
  std::vector<float> run(bool bf16_c, bool fused, GemmSlicing slicing) const {
    std::vector<float> c32 = test::poisoned(static_cast<size_t>(s.m * ldc));
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = s.n; j < ldc; ++j) c32[static_cast<size_t>(i * ldc + j)] = 7.25f;
    std::vector<std::uint16_t> c16 = bf16_bits(c32);
    if (fused) {
      Bf16GemmOut out;
      if (bf16_c) {
        out.bf16 = c16.data();
      } else {
        out.f32 = c32.data();
      }
      gemm_bf16({GemmBackend::kOneDnn, &matmuls}, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                out, ldc, slicing, bias.data());
      return bf16_c ? widen(c16) : c32;
    }
    std::vector<float> acc = c32;
    gemm_bf16({GemmBackend::kOneDnn, &matmuls}, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
              Bf16GemmOut{acc.data(), nullptr}, ldc, slicing);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) acc[static_cast<size_t>(i * ldc + j)] += bias[static_cast<size_t>(j)];
    if (!bf16_c) return acc;
    for (int64_t i = 0; i < s.m; ++i)  // round the written part once, as the chunked bias pass does
      cast_f32_to_bf16(acc.data() + i * ldc, c16.data() + i * ldc, s.n);
    return widen(c16);
  }
};

// Odd sizes; the last three are sliced (m*n*k >= 2^20) along n, along m, and along n with a tail slice.
constexpr Case kCases[] = {{1, 1, 1, false, false},    {3, 7, 13, true, false},     {37, 65, 13, false, true},
                           {65, 37, 129, true, true},  {96, 515, 77, false, false}, {515, 96, 77, true, false},
                           {200, 333, 129, false, true}};

TEST(KernelGemmBf16Bias, MatchesDoubleReferenceAndTheTwoPassBits) {
  SKIP_UNLESS_BF16_ONEDNN();
  int seed = 0;
  for (const Case& c : kCases) {
    const Problem p(c, ++seed);
    for (const bool bf16_c : {false, true}) {
      for (const GemmSlicing slicing : {GemmSlicing::kPerThread, GemmSlicing::kShapeFixed}) {
        const std::string what = p.name() + (bf16_c ? ", bf16 C" : ", f32 C") +
                                 (slicing == GemmSlicing::kShapeFixed ? ", shape-fixed" : ", per-thread");
        const std::vector<float> fused = p.run(bf16_c, true, slicing);
        size_t wrong = 0, padding = 0;
        double norm = 0.0;
        for (int64_t i = 0; i < c.m; ++i) {
          for (int64_t j = 0; j < p.ldc; ++j) {
            const size_t e = static_cast<size_t>(i * p.ldc + j);
            if (j >= c.n) {
              padding += fused[e] != 7.25f;
              continue;
            }
            norm += std::fabs(fused[e]);
            const double err = std::fabs(fused[e] - p.want[e]);
            // f32 accumulation of exact bf16 products; a bf16 C adds one rounding (2^-8 relative).
            wrong += !(err <= 1e-5 * p.scale[e] + (bf16_c ? std::fabs(p.want[e]) / 256.0 : 0.0) + 1e-30);
          }
        }
        EXPECT_EQ(wrong, 0u) << what << ": elements off the double reference";
        EXPECT_EQ(padding, 0u) << what << ": padding past n was written";
        EXPECT_GT(norm, 0.0) << what;
        const std::vector<float> two_pass = p.run(bf16_c, false, slicing);
        EXPECT_EQ(std::memcmp(fused.data(), two_pass.data(), fused.size() * sizeof(float)), 0)
            << what << ": the epilogue's bits differ from the product-then-bias path";
      }
    }
  }
}

TEST(KernelGemmBf16Bias, ShapeFixedIsBitIdenticalAcrossThreadCounts) {
  SKIP_UNLESS_BF16_ONEDNN();
  const int saved = omp_get_max_threads();
  int seed = 100;
  for (const Case& c : kCases) {
    const Problem p(c, ++seed);
    for (const bool bf16_c : {false, true}) {
      omp_set_num_threads(1);
      const std::vector<float> one = p.run(bf16_c, true, GemmSlicing::kShapeFixed);
      omp_set_num_threads(2);
      const std::vector<float> two = p.run(bf16_c, true, GemmSlicing::kShapeFixed);
      omp_set_num_threads(saved);
      EXPECT_GT(test::l2_norm(one), 0.0);
      EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
          << p.name() << (bf16_c ? ", bf16 C" : ", f32 C") << ": differs between 1 and 2 threads";
    }
  }
}

TEST(KernelGemmBf16Bias, BatchedAddsTheBiasToEveryEntryAndKZeroGivesTheBias) {
  SKIP_UNLESS_BF16_ONEDNN();
  const int64_t batch = 3, m = 40, n = 50, k = 24;
  const auto a = bf16_bits(test::random_floats(static_cast<size_t>(batch * m * k), 41));
  const auto b = bf16_bits(test::random_floats(static_cast<size_t>(k * n), 42));
  const auto bias = test::random_floats(static_cast<size_t>(n), 43, 3.0f);
  std::vector<float> c = test::poisoned(static_cast<size_t>(batch * m * n));
  OneDnnMatmuls matmuls;
  const GemmLibrary onednn{GemmBackend::kOneDnn, &matmuls};
  gemm_bf16_strided_batched(onednn, false, false, m, n, k, 1.0f, a.data(), k, m * k, b.data(), n, 0,
                            0.0f, Bf16GemmOut{c.data(), nullptr}, n, m * n, batch, GemmSlicing::kPerThread,
                            bias.data());
  const auto af = widen(a), bf = widen(b);
  size_t wrong = 0;
  for (int64_t e = 0; e < batch; ++e) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = bias[static_cast<size_t>(j)], mag = std::fabs(acc);
        for (int64_t p = 0; p < k; ++p) {
          const double prod = double(af[(e * m + i) * k + p]) * bf[p * n + j];
          acc += prod;
          mag += std::fabs(prod);
        }
        wrong += !(std::fabs(c[static_cast<size_t>((e * m + i) * n + j)] - acc) <= 1e-5 * mag);
      }
    }
  }
  EXPECT_EQ(wrong, 0u) << "batched bias epilogue off the double reference";
  std::vector<std::uint16_t> c16(static_cast<size_t>(2 * n), 0xffff);
  gemm_bf16(onednn, false, false, 2, n, 0, 1.0f, a.data(), 1, b.data(), n, 0.0f,
            Bf16GemmOut{nullptr, c16.data()}, n, GemmSlicing::kPerThread, bias.data());
  const std::vector<float> got = widen(c16), want = widen(bf16_bits(bias));
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(std::memcmp(got.data() + i * n, want.data(), static_cast<size_t>(n) * sizeof(float)), 0)
        << "k = 0: row " << i << " is not the bias rounded to bf16";
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::gemm_bf16_bias_test
