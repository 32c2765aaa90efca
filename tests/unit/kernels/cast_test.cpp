// f32 <-> bf16 casts: narrowing against a double-precision round-to-nearest-even reference (written here from
// the definition, not from float_to_bf16), widening exact; special values (NaN payloads, infinities, signed
// zeros, subnormals, ties, the largest finite float rounding to infinity); sizes that hit each path's vector
// tail and the OpenMP path; and every vector path this CPU has (AVX2, AVX-512) giving the baseline path's bits. The
// block-of-rows narrowing (flash attention's output and gradient rows) likewise, on strided rows split between threads.
#include "kernels/cpu/cast.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/dtype.hpp"
#include "kernel_test_util.hpp"
#include "support/isa_paths.hpp"

namespace cleave::kernels::cpu::cast_test {
namespace {

// The nearest bf16 (8 significand bits) to x, ties to even, found in double arithmetic: the two bf16
// neighbours by truncation and by stepping up, then the closer one. NaN: quiet NaN with x's sign and top bits.
std::uint16_t bf16_ref(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint16_t down = static_cast<std::uint16_t>(bits >> 16);  // toward zero
  if ((bits & 0xffffu) == 0) return down;
  const std::uint16_t up = static_cast<std::uint16_t>(down + 1);  // away from zero (may reach infinity)
  const double lo = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(down) << 16));
  const double hi = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(up) << 16));
  const double dlo = std::fabs(static_cast<double>(x) - lo);
  // The infinity above the largest finite bf16 counts as 2^128 (IEEE rounding's rule for overflow).
  const double dhi = std::isinf(hi) ? std::fabs(std::ldexp(std::signbit(x) ? -1.0 : 1.0, 128) - x)
                                    : std::fabs(static_cast<double>(x) - hi);
  if (dlo < dhi) return down;
  if (dhi < dlo) return up;
  return (down & 1u) == 0 ? down : up;
}

std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                          1.0f, -1.0f, 3.0f, 1e-40f, -3.5e-39f};
  for (std::uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff812345u, 0x7fffffffu,
                             0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7f8000u, 0x00008000u,
                             0x00018000u, 0x80008000u, 0x7f7fffffu, 0x3effffffu}) {
    v.push_back(std::bit_cast<float>(bits));  // NaNs (quiet, signalling, payloads), ties, overflow, subnormal ties
  }
  return v;
}

// n values: the special values in turn, with random floats of every magnitude (random bit patterns) between.
std::vector<float> inputs(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<float> special = special_values();
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = i % 3 == 0 ? special[(i / 3) % special.size()]
                      : std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  }
  return v;
}

constexpr std::int64_t kSizes[] = {0, 1, 3, 4, 5, 7, 8, 15, 16, 17, 31, 33, 4095, 4096, 4097, 40003, 65537};

std::vector<VectorIsa> isas() {
  std::vector<VectorIsa> out;
  test::for_each_isa_path(test::kEveryIsaPath, [&](VectorIsa isa) { out.push_back(isa); });
  return out;
}

TEST(KernelCast, NarrowingRoundsToNearestEvenOnEveryPath) {
  for (VectorIsa isa : isas()) {
    for (std::int64_t n : kSizes) {
      const std::vector<float> x = inputs(static_cast<std::size_t>(n), 7 + static_cast<std::uint64_t>(n));
      std::vector<std::uint16_t> y(static_cast<std::size_t>(n) + 1, 0xbeefu);  // one past the end: untouched
      cast_f32_to_bf16_isa(isa, x.data(), y.data(), n);
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t want = bf16_ref(x[static_cast<std::size_t>(i)]);
        if (y[static_cast<std::size_t>(i)] != want && ++wrong <= 3) {
          ADD_FAILURE() << "isa " << static_cast<int>(isa) << " n " << n << " element " << i << ": x bits 0x"
                        << std::hex << std::bit_cast<std::uint32_t>(x[static_cast<std::size_t>(i)]) << " gave 0x"
                        << y[static_cast<std::size_t>(i)] << ", want 0x" << want;
        }
      }
      EXPECT_EQ(wrong, 0) << "isa " << static_cast<int>(isa) << " n " << n;
      EXPECT_EQ(y.back(), 0xbeefu) << "wrote past n = " << n;
    }
  }
}

TEST(KernelCast, SpecialValuesNarrowAsTheDefinitionSays) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {inf, -inf, 0.0f, -0.0f, std::numeric_limits<float>::max(), std::bit_cast<float>(0x3f808000u),
                          std::bit_cast<float>(0x3f818000u), std::bit_cast<float>(0x7fa00000u)};
  std::vector<std::uint16_t> y(x.size());
  for (VectorIsa isa : isas()) {
    cast_f32_to_bf16_isa(isa, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    EXPECT_EQ(y[0], 0x7f80u);
    EXPECT_EQ(y[1], 0xff80u);
    EXPECT_EQ(y[2], 0x0000u);
    EXPECT_EQ(y[3], 0x8000u);
    EXPECT_EQ(y[4], 0x7f80u) << "the largest float rounds to infinity";
    EXPECT_EQ(y[5], 0x3f80u) << "a tie rounds to the even neighbour (down)";
    EXPECT_EQ(y[6], 0x3f82u) << "a tie rounds to the even neighbour (up)";
    EXPECT_EQ(y[7], 0x7fe0u) << "a signalling NaN stays NaN, made quiet";
  }
}

TEST(KernelCast, WideningIsExactOnEveryPath) {
  for (VectorIsa isa : isas()) {
    for (std::int64_t n : kSizes) {
      std::vector<std::uint16_t> x(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i * 2654435761u >> 7);
      std::vector<float> y(static_cast<std::size_t>(n) + 1, 42.0f);
      cast_bf16_to_f32_isa(isa, x.data(), y.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t got = std::bit_cast<std::uint32_t>(y[static_cast<std::size_t>(i)]);
        ASSERT_EQ(got, static_cast<std::uint32_t>(x[static_cast<std::size_t>(i)]) << 16)
            << "isa " << static_cast<int>(isa) << " n " << n << " element " << i;
      }
      EXPECT_EQ(y.back(), 42.0f) << "wrote past n = " << n;
    }
  }
}

TEST(KernelCast, EveryIsaPathGivesTheSameBits) {
  const std::int64_t n = 300003;  // parallel (kStreamingParallelMinElements), with a tail on every path
  const std::vector<float> x = inputs(static_cast<std::size_t>(n), 99);
  std::vector<std::uint16_t> base(static_cast<std::size_t>(n)), other(static_cast<std::size_t>(n));
  cast_f32_to_bf16_isa(VectorIsa::kBaseline, x.data(), base.data(), n);
  for (VectorIsa isa : isas()) {
    cast_f32_to_bf16_isa(isa, x.data(), other.data(), n);
    EXPECT_EQ(std::memcmp(base.data(), other.data(), base.size() * 2), 0) << "isa " << static_cast<int>(isa);
  }
  std::vector<std::uint16_t> via_default(static_cast<std::size_t>(n));
  cast_f32_to_bf16(x.data(), via_default.data(), n);
  EXPECT_EQ(std::memcmp(base.data(), via_default.data(), base.size() * 2), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(base[static_cast<std::size_t>(i)], float_to_bf16(x[static_cast<std::size_t>(i)])) << "element " << i;
  }
}

// Rows of n values between gaps (row strides past n), split into blocks of rows between the threads as attention's
// tasks split them: every value narrowed as the reference narrows it, the gaps untouched, on every path and thread
// count. Values over 40 binades either side of 1 with the special values among them, so a wrong rounding shows.
TEST(KernelCast, RowsNarrowAsTheReferenceOnEveryPathAndThreadCount) {
  int checked = 0;
  test::for_each_isa_path_and_threads([&](VectorIsa isa, int threads) {
    for (const std::int64_t n : {1, 6, 15, 16, 17, 32, 33, 64}) {
      const std::int64_t rows = 7, ldx = n + 3, ldy = n + 5, per_block = 3;
      std::vector<float> x = test::random_floats_spanning_binades(static_cast<std::size_t>(rows * ldx), 7 + n, 80,
                                                                  std::ldexp(1.0f, 40));
      const std::vector<float> special = special_values();
      for (std::size_t i = 0; i < x.size(); i += 5) x[i] = special[(i / 5) % special.size()];
      std::vector<std::uint16_t> y(static_cast<std::size_t>(rows * ldy), 0xabcd);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
      for (std::int64_t r0 = 0; r0 < rows; r0 += per_block) {
        cast_f32_to_bf16_rows_isa(isa, x.data() + r0 * ldx, ldx, y.data() + r0 * ldy, ldy,
                                  std::min(per_block, rows - r0), n);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < ldy; ++c) {
          const std::uint16_t got = y[static_cast<std::size_t>(r * ldy + c)];
          const std::uint16_t want = c < n ? bf16_ref(x[static_cast<std::size_t>(r * ldx + c)]) : 0xabcd;
          ASSERT_EQ(got, want) << test::isa_label(isa) << " threads " << threads << " n " << n << " at " << r << ", "
                               << c;
        }
      }
      ++checked;
    }
  });
  EXPECT_GT(checked, 0);
  std::vector<float> x = test::random_floats_spanning_binades(40, 3, 80);
  std::vector<std::uint16_t> serial(40, 0), path(40, 0);
  cast_f32_to_bf16_rows_serial(x.data(), 10, serial.data(), 10, 4, 9);
  cast_f32_to_bf16_rows_isa(VectorIsa::kBaseline, x.data(), 10, path.data(), 10, 4, 9);
  EXPECT_TRUE(test::same_bits(serial, path));
}

}  // namespace
}  // namespace cleave::kernels::cpu::cast_test
