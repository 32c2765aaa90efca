// An exact, order-independent sum of squares of f32 values (the gradient norm's Σ g²), usable on the host and
// in CUDA device code.
//
// Invariant: the accumulated value is exactly Σ x_i² (every square of an f32 is an integer multiple of 2^-298
// below 2^256, so a fixed-point number of 18 32-bit digits holds it with no rounding), plus counts of NaN and
// infinite inputs. Integer addition is associative, so any split of the inputs (threads, CUDA blocks, dp
// shards, expert-parallel layouts, ranks) merged in any order gives the same digits, and to_double() turns
// them into one double the same way every time: the same bits for any layout and any thread count.
// Headroom: each digit is a uint64 that takes < 2^33 per add_square and normalize() carries, so up to 2^30
// squares may be added between normalize() calls; the wire form (normalized digits as doubles) stays exact
// when summed over fewer than 2^21 ranks.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__CUDACC__)
#define CLEAVE_EXACT_HD __host__ __device__
#else
#define CLEAVE_EXACT_HD
#endif

namespace cleave::kernels {

struct ExactSquareSum {
  static constexpr int kDigits = 18;           // 576 bits >= 554 needed (2^-298 .. 2^256 times the count)
  static constexpr int kUnitExponent = -298;   // digit 0's lowest bit is 2^-298 (the smallest f32 square)
  static constexpr int kWireSize = kDigits + 2;  // digits, then the NaN and infinity counts
  uint64_t digit[kDigits] = {};                // base 2^32, little end first; may hold uncarried excess
  uint64_t nan = 0;
  uint64_t inf = 0;

  // Adds v * 2^(shift + kUnitExponent), v < 2^64, shift <= 32 * (kDigits - 2) - 1.
  CLEAVE_EXACT_HD void add_scaled(uint64_t v, int shift) {
    const int d = shift >> 5;
    const int s = shift & 31;
    const uint64_t lo = (v & 0xffffffffull) << s;  // < 2^63
    const uint64_t hi = (v >> 32) << s;            // < 2^63
    digit[d] += lo & 0xffffffffull;
    digit[d + 1] += (lo >> 32) + (hi & 0xffffffffull);
    digit[d + 2] += hi >> 32;
  }

  // Adds x² exactly (x = m 2^(e-150) with m < 2^24, so x² = m² 2^(2e-300), m² < 2^48).
  CLEAVE_EXACT_HD void add_square(float x) {
#if defined(__CUDA_ARCH__)
    const uint32_t u = __float_as_uint(x);
#else
    uint32_t u = 0;
    std::memcpy(&u, &x, sizeof u);
#endif
    const uint32_t e = (u >> 23) & 0xffu;
    const uint32_t m = u & 0x7fffffu;
    if (e == 0xffu) {
      if (m != 0) ++nan;
      else ++inf;
      return;
    }
    const uint64_t mant = e != 0 ? (m | 0x800000u) : m;
    add_scaled(mant * mant, square_shift(e));
  }

  // Shift of an f32 square with exponent field e (0..254) in units of 2^kUnitExponent: 2 max(e, 1) - 2.
  CLEAVE_EXACT_HD static int square_shift(uint32_t e) { return 2 * static_cast<int>(e != 0 ? e : 1) - 2; }

  // Carries every digit's excess into the next one; afterwards digit[i] < 2^32 for i < kDigits - 1.
  CLEAVE_EXACT_HD void normalize() {
    for (int i = 0; i + 1 < kDigits; ++i) {
      digit[i + 1] += digit[i] >> 32;
      digit[i] &= 0xffffffffull;
    }
  }

  // this += other (both may be unnormalized within the headroom); normalizes.
  CLEAVE_EXACT_HD void merge(const ExactSquareSum& other) {
    for (int i = 0; i < kDigits; ++i) digit[i] += other.digit[i];
    nan += other.nan;
    inf += other.inf;
    normalize();
  }

  // The sum rounded to a double by a fixed procedure (top digit first); NaN if any input was NaN, else +inf if
  // any was infinite. The same digits always give the same bits.
  double to_double() const {
    if (nan != 0) return std::numeric_limits<double>::quiet_NaN();
    if (inf != 0) return std::numeric_limits<double>::infinity();
    ExactSquareSum n = *this;
    n.normalize();
    double total = 0.0;
    for (int i = kDigits - 1; i >= 0; --i) {
      if (n.digit[i] != 0) total += std::ldexp(static_cast<double>(n.digit[i]), 32 * i + kUnitExponent);
    }
    return total;
  }

  // Normalized digits and the counts as doubles (each < 2^53 exactly): element-wise sums of these over ranks
  // (any order) are exact, and from_wire() of the sum is the merge of every rank's value. As a fixed array
  // (nothing allocated) or a vector.
  using Wire = std::array<double, kWireSize>;
  Wire wire() const {
    ExactSquareSum n = *this;
    n.normalize();
    Wire wire{};
    for (int i = 0; i < kDigits; ++i) wire[static_cast<std::size_t>(i)] = static_cast<double>(n.digit[i]);
    wire[kDigits] = static_cast<double>(n.nan);
    wire[kDigits + 1] = static_cast<double>(n.inf);
    return wire;
  }
  std::vector<double> to_wire() const {
    const Wire w = wire();
    return std::vector<double>(w.begin(), w.end());
  }
  static ExactSquareSum from_wire(const double* wire, std::size_t size) {
    ExactSquareSum s;
    for (int i = 0; i < kDigits && static_cast<std::size_t>(i) < size; ++i) s.digit[i] = static_cast<uint64_t>(wire[i]);
    if (size >= static_cast<std::size_t>(kWireSize)) {
      s.nan = static_cast<uint64_t>(wire[kDigits]);
      s.inf = static_cast<uint64_t>(wire[kDigits + 1]);
    }
    s.normalize();
    return s;
  }
  static ExactSquareSum from_wire(const std::vector<double>& wire) { return from_wire(wire.data(), wire.size()); }
  static ExactSquareSum from_wire(const Wire& wire) { return from_wire(wire.data(), wire.size()); }

  bool operator==(const ExactSquareSum& other) const {
    ExactSquareSum a = *this;
    ExactSquareSum b = other;
    a.normalize();
    b.normalize();
    for (int i = 0; i < kDigits; ++i) {
      if (a.digit[i] != b.digit[i]) return false;
    }
    return a.nan == b.nan && a.inf == b.inf;
  }
};

}  // namespace cleave::kernels

#undef CLEAVE_EXACT_HD
