// Shared helpers for the CPU kernel tests: seeded random inputs that are never zero (of one binade, or spread over many
// binades for the tests of a fixed summation order), NaN-poisoned outputs (so an element a kernel forgets to write
// fails), and an element-wise comparison against a double-precision reference that counts and reports the wrong
// elements (NaN always counts as wrong).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/cpu/cast.hpp"

namespace cleave::kernels::test {

// Uniform magnitudes in [0.05, 1) * scale with a random sign: never zero, never tiny.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> magnitude(0.05f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(n);
  for (auto& x : v) x = (negative(rng) ? -1.0f : 1.0f) * magnitude(rng) * scale;
  return v;
}

// Magnitudes m * 2^-e * scale, m uniform in [1, 2) and e uniform in {1, ..., binades}, with a random sign: never zero,
// below scale, over `binades` binades. For the tests that check a fixed order of additions bit for bit: values of one
// binade (random_floats) rounded to bf16 hold 8 significant bits and their products 16, so f32 sums of them are
// mostly exact and any order gives the same bits (such a test cannot fail). Spread over many binades, the small
// addends fall below the sum's last bit and round, so an order change shows. bf16 x bf16 products round in f32 sums
// with ~11 binades per operand (moe_kernels_test); sums of bf16 values themselves need ~24 (an addend rounds only when
// it lies more than 16 binades below the sum).
inline std::vector<float> random_floats_spanning_binades(size_t n, uint64_t seed, int binades, float scale = 1.0f) {
  CLEAVE_ASSERT(binades >= 1 && binades <= 100, "random_floats_spanning_binades: binades {} not in [1, 100]", binades);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(1, binades);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(n);
  for (auto& x : v) {
    const float m = mantissa(rng);  // one draw per statement: the draws' order is fixed
    const int e = exponent(rng);
    x = (negative(rng) ? -1.0f : 1.0f) * std::ldexp(m, -e) * scale;
  }
  return v;
}

// Small non-zero integers in [-range, range]: products and sums are exact in float.
inline std::vector<float> random_small_ints(size_t n, uint64_t seed, int range = 4) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(1, range);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(negative(rng) ? -dist(rng) : dist(rng));
  return v;
}

// random_floats rounded to bf16 (bit patterns, as a bf16 tensor holds them), and the two whole-tensor casts: the
// reference path of the kernels that convert bf16 inside their loops.
inline std::vector<uint16_t> narrowed(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  cpu::cast_f32_to_bf16(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}
inline std::vector<float> widened(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  cpu::cast_bf16_to_f32(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}
inline std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale = 1.0f) {
  return narrowed(random_floats(n, seed, scale));
}
inline std::vector<uint16_t> random_bf16_spanning_binades(size_t n, uint64_t seed, int binades, float scale = 1.0f) {
  return narrowed(random_floats_spanning_binades(n, seed, binades, scale));
}

// Bit for bit (memcmp: -0 differs from +0, NaN payloads count).
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

inline std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

template <typename T>
double l2_norm(const std::vector<T>& v) {
  double s = 0.0;
  for (const auto& x : v) s += static_cast<double>(x) * static_cast<double>(x);
  return std::sqrt(s);
}

// |got - want| <= atol + rtol * |want| for every element; reports the count and the first few misses.
template <typename G, typename W>
void expect_close(const G* got, const W* want, size_t n, double atol, double rtol, const std::string& what) {
  size_t wrong = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = static_cast<double>(want[i]);
    const bool ok = std::fabs(g - w) <= atol + rtol * std::fabs(w);  // false for NaN
    if (!ok) {
      if (wrong < 5) first += "\n  [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << n << " elements differ" << first;
}

template <typename G, typename W>
void expect_close(const std::vector<G>& got, const std::vector<W>& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expect_close(got.data(), want.data(), got.size(), atol, rtol, what);
}

// Central finite difference of a scalar function of one input element (double arithmetic on the loss).
template <typename Loss>
double finite_difference(std::vector<float>& x, size_t i, float h, Loss&& loss) {
  const float saved = x[i];
  const float up = saved + h;
  const float down = saved - h;
  x[i] = up;
  const double plus = loss();
  x[i] = down;
  const double minus = loss();
  x[i] = saved;
  return (plus - minus) / (static_cast<double>(up) - static_cast<double>(down));  // the step float really took
}

}  // namespace cleave::kernels::test
