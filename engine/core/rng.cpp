// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and derived draws.
#include "engine/core/rng.hpp"

#include <cmath>

namespace cleave::rng {
namespace {

constexpr std::uint32_t kMul0 = 0xD2511F53u;
constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

inline float to_unit(std::uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

}  // namespace

std::uint64_t hash_key(std::string_view name) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::array<std::uint32_t, 4> philox(std::uint64_t seed, std::uint64_t key, std::uint64_t counter) {
  // 128-bit counter = (counter, key); 64-bit Philox key = seed.
  std::array<std::uint32_t, 4> c = {static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
                                    static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32)};
  std::uint32_t k0 = static_cast<std::uint32_t>(seed);
  std::uint32_t k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

float uniform(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  return to_unit(philox(seed, key, index)[0]);
}

float normal(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  const auto r = philox(seed, key, index);
  // Box-Muller on two independent 24-bit uniforms; u1 in (0, 1] keeps log finite.
  const float u1 = (static_cast<float>(r[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
  const float u2 = to_unit(r[1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.283185307179586f * u2);
}

std::uint64_t bits64(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  const auto r = philox(seed, key, index);
  return (static_cast<std::uint64_t>(r[1]) << 32) | r[0];
}

void fill_normal(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t key, float mean, float std,
                 std::int64_t first_index) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = mean + std * normal(seed, key, static_cast<std::uint64_t>(first_index + i));
  }
}

void fill_uniform(float* out, std::int64_t n, std::uint64_t seed, std::uint64_t key, float low, float high,
                  std::int64_t first_index) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = low + (high - low) * uniform(seed, key, static_cast<std::uint64_t>(first_index + i));
  }
}

void fill_normal_block(float* out, std::int64_t rows, std::int64_t cols, std::int64_t logical_cols,
                       std::int64_t row0, std::int64_t col0, std::uint64_t seed, std::uint64_t key, float mean,
                       float std) {
  for (std::int64_t r = 0; r < rows; ++r) {
    fill_normal(out + r * cols, cols, seed, key, mean, std, (row0 + r) * logical_cols + col0);
  }
}

}  // namespace cleave::rng
