// The GEMM plan caches' policy on the CPU (no GPU, no cuBLASLt call): LruCache (kernels/cuda/lru_cache.hpp)
// keeps at most its capacity, evicts the least recently used entry, counts hits, misses and evictions, and
// find() refreshes recency; gemm_heuristic_extent's buckets (four per octave, never below the extent, at most
// 25% above it, exact up to 16) and gemm_heuristic_problem (kernels/cuda/gemm.hpp: which extents a problem
// shares its heuristic query over, never one that would make a leading dimension invalid; batched problems
// unchanged). A mixture-of-experts run's row counts 1..4096 need at most 16 + 4 * 8 heuristic problems.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/lru_cache.hpp"

namespace cleave::testing::gemm_plan_cache_test {
namespace {

namespace kc = kernels::cuda;

TEST(LruCache, EvictsTheLeastRecentlyUsedAtCapacity) {
  kc::LruCache<int, std::string> cache(3);
  EXPECT_EQ(cache.capacity(), 3u);
  EXPECT_EQ(cache.find(1), nullptr);
  cache.insert(1, "one");
  cache.insert(2, "two");
  cache.insert(3, "three");
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.keys_by_recency(), (std::vector<int>{3, 2, 1}));
  ASSERT_NE(cache.find(1), nullptr);  // 1 is now the most recent: 2 is the oldest
  EXPECT_EQ(*cache.find(1), "one");
  EXPECT_EQ(cache.keys_by_recency(), (std::vector<int>{1, 3, 2}));
  cache.insert(4, "four");  // evicts 2
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.find(2), nullptr);
  EXPECT_EQ(cache.keys_by_recency(), (std::vector<int>{4, 1, 3}));
  cache.insert(5, "five");  // evicts 3
  EXPECT_EQ(cache.keys_by_recency(), (std::vector<int>{5, 4, 1}));
  EXPECT_EQ(cache.stats().hits, 2u);
  EXPECT_EQ(cache.stats().misses, 2u);
  EXPECT_EQ(cache.stats().evictions, 2u);
}

TEST(LruCache, EvictionDestroysTheValueAndClearKeepsTheCounts) {
  auto alive = std::make_shared<int>(0);
  {
    kc::LruCache<int, std::shared_ptr<int>> cache(1);
    cache.insert(1, alive);
    EXPECT_EQ(alive.use_count(), 2);
    cache.insert(2, std::make_shared<int>(2));  // evicts 1: its value is destroyed
    EXPECT_EQ(alive.use_count(), 1);
    EXPECT_EQ(cache.stats().evictions, 1u);
    EXPECT_NE(cache.find(2), nullptr);
    cache.clear();
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_EQ(cache.stats().hits, 1u);
  }
  EXPECT_THROW((kc::LruCache<int, int>(0)), Error);
}

TEST(LruCache, ManyKeysStayBounded) {
  // Row counts that never repeat (the unbounded map's worst case) keep the cache at its capacity.
  kc::LruCache<long, int> cache(64);
  for (long rows = 1; rows <= 10'000; ++rows) {
    if (cache.find(rows) == nullptr) cache.insert(rows, 0);
    ASSERT_LE(cache.size(), 64u);
  }
  EXPECT_EQ(cache.stats().misses, 10'000u);
  EXPECT_EQ(cache.stats().evictions, 10'000u - 64u);
}

TEST(GemmHeuristicExtent, FourBucketsPerOctaveNeverBelowAtMostAQuarterAbove) {
  for (std::int64_t e = 0; e <= 16; ++e) EXPECT_EQ(kc::gemm_heuristic_extent(e), e);
  EXPECT_EQ(kc::gemm_heuristic_extent(17), 20);
  EXPECT_EQ(kc::gemm_heuristic_extent(20), 20);
  EXPECT_EQ(kc::gemm_heuristic_extent(21), 24);
  EXPECT_EQ(kc::gemm_heuristic_extent(32), 32);
  EXPECT_EQ(kc::gemm_heuristic_extent(33), 40);
  EXPECT_EQ(kc::gemm_heuristic_extent(1000), 1024);
  EXPECT_EQ(kc::gemm_heuristic_extent(1025), 1280);
  EXPECT_EQ(kc::gemm_heuristic_extent(768), 768);    // model widths stay their own problem
  EXPECT_EQ(kc::gemm_heuristic_extent(3072), 3072);
  EXPECT_EQ(kc::gemm_heuristic_extent(50257), 57344);
  std::set<std::int64_t> buckets;
  for (std::int64_t e = 1; e <= 4096; ++e) {
    const std::int64_t b = kc::gemm_heuristic_extent(e);
    ASSERT_GE(b, e);
    ASSERT_LE(4 * b, 5 * e) << e;
    ASSERT_EQ(kc::gemm_heuristic_extent(b), b) << "a bucket is its own bucket: " << e;
    buckets.insert(b);
  }
  EXPECT_EQ(buckets.size(), 16u + 4u * 8u);  // 1..16, then (16, 4096] in 8 octaves
}

kc::GemmArgs rows_problem(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k) {
  static float storage[8];
  kc::GemmArgs args;
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = storage;
  args.b = storage;
  args.c = storage;
  args.lda = trans_a ? m : k;  // tight leading dimensions
  args.ldb = trans_b ? k : n;
  args.ldc = n;
  return args;
}

TEST(GemmHeuristicProblem, BucketsRowExtentsOnlyWhereLeadingDimensionsStayValid) {
  // The expert GEMMs: [rows, d] x [f, d]^T (m = rows) and the weight gradient [rows, f]^T x [rows, d] (k = rows).
  kc::GemmArgs forward = rows_problem(false, true, 37, 24, 40);
  kc::GemmArgs h = kc::gemm_heuristic_problem(forward);
  EXPECT_EQ(h.m, 40);
  EXPECT_EQ(h.k, 40);
  EXPECT_EQ(h.n, 24);
  EXPECT_EQ(h.lda, forward.lda);
  EXPECT_EQ(h.ldb, forward.ldb);
  EXPECT_EQ(h.ldc, forward.ldc);
  EXPECT_EQ(h.a, forward.a);
  EXPECT_TRUE(kc::gemm_can_implement(h).empty()) << kc::gemm_can_implement(h);

  kc::GemmArgs weight_grad = rows_problem(true, false, 23, 40, 37);
  h = kc::gemm_heuristic_problem(weight_grad);
  EXPECT_EQ(h.k, 40);  // the rows are A's and B's outer extent: no leading dimension depends on them
  EXPECT_EQ(h.m, 23);  // A stored [k, m] with lda = 23 is tight: m stays (its bucket is 24)
  EXPECT_TRUE(kc::gemm_can_implement(h).empty()) << kc::gemm_can_implement(h);

  // Tight leading dimensions that a bucketed extent would break keep the exact extent.
  kc::GemmArgs tight = rows_problem(true, false, 37, 8, 8);  // A stored [k, m] with lda = m = 37
  EXPECT_EQ(kc::gemm_heuristic_problem(tight).m, 37);
  tight = rows_problem(false, true, 8, 8, 37);  // A [m, k] lda = 37, B [n, k] ldb = 37
  EXPECT_EQ(kc::gemm_heuristic_problem(tight).k, 37);
  tight.lda = 40;  // B's ldb still holds k at 37
  EXPECT_EQ(kc::gemm_heuristic_problem(tight).k, 37);
  tight.ldb = 40;
  EXPECT_EQ(kc::gemm_heuristic_problem(tight).k, 40);

  // Every row count of a bucket shares one heuristic problem.
  for (std::int64_t rows = 33; rows <= 40; ++rows) {
    EXPECT_EQ(kc::gemm_heuristic_problem(rows_problem(false, true, rows, 24, 64)).m, 40);
  }

  // Batched problems (attention) are their own heuristic problem.
  kc::GemmArgs batched = rows_problem(false, false, 37, 24, 37);
  batched.batch = 4;
  batched.stride_a = 37 * 37;
  h = kc::gemm_heuristic_problem(batched);
  EXPECT_EQ(h.m, 37);
  EXPECT_EQ(h.k, 37);
}

}  // namespace
}  // namespace cleave::testing::gemm_plan_cache_test
