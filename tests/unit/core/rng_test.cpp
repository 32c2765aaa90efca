// Counter-based RNG: deterministic by (seed, key, index), shard-independent, statistically sane.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/core/rng.hpp"

namespace cleave::rng_test {
namespace {

TEST(Rng, SameKeySameValuesDifferentKeyDifferentValues) {
  const auto k = rng::hash_key("blocks.0.attn.qkv.weight");
  EXPECT_EQ(rng::normal(7, k, 123), rng::normal(7, k, 123));
  EXPECT_NE(rng::normal(7, k, 123), rng::normal(8, k, 123));
  EXPECT_NE(rng::normal(7, k, 123), rng::normal(7, rng::hash_key("other"), 123));
}

TEST(Rng, BlockFillEqualsSliceOfLogicalTensor) {
  const std::int64_t rows = 5, cols = 7;
  std::vector<float> full(rows * cols);
  rng::fill_normal(full.data(), rows * cols, 3, 11, 0.0f, 1.0f);
  std::vector<float> block(3 * 4);
  rng::fill_normal_block(block.data(), 3, 4, cols, 1, 2, 3, 11, 0.0f, 1.0f);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(block[r * 4 + c], full[(1 + r) * cols + 2 + c]);
}

TEST(Rng, NormalMomentsAreClose) {
  const int n = 200000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng::normal(1, 2, static_cast<std::uint64_t>(i));
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
  double u = 0;
  for (int i = 0; i < n; ++i) u += rng::uniform(1, 3, static_cast<std::uint64_t>(i));
  EXPECT_NEAR(u / n, 0.5, 0.005);
}

}  // namespace
}  // namespace cleave::rng_test
