// engine/planner/profile_measure.hpp's CacheEvictor: it reads twice the cache it is given (a rank's share of the
// last-level cache, so that the node's ranks evicting at once read twice the whole cache), 64 MiB when the cache is
// unknown, within 8 and 256 MiB.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/planner/profile_measure.hpp"

namespace cleave::planner::cache_evictor_test {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

TEST(CacheEvictor, ReadsTwiceTheShareItIsGiven) {
  // Two ranks on the 105 MiB cache of a Xeon: each reads its 52.5 MiB share twice, 105 MiB, not 210.
  EXPECT_EQ(CacheEvictor(105 * kMiB / 2).bytes_read(), 105 * kMiB);
  EXPECT_EQ(CacheEvictor(32 * kMiB).bytes_read(), 64 * kMiB);
}

TEST(CacheEvictor, UnknownCacheReads64MiBAndTheBoundsHold) {
  EXPECT_EQ(CacheEvictor(0).bytes_read(), 64 * kMiB);
  EXPECT_EQ(CacheEvictor(1 * kMiB).bytes_read(), 8 * kMiB);
  EXPECT_EQ(CacheEvictor(1024 * kMiB).bytes_read(), 256 * kMiB);
  CacheEvictor evictor(4 * kMiB);
  evictor.evict();  // reads the buffer (no observable result beyond not crashing)
}

}  // namespace
}  // namespace cleave::planner::cache_evictor_test
