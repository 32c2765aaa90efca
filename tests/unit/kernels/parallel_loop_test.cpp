// CLEAVE_PARALLEL_FOR (kernels/cpu/parallel.hpp): every index runs exactly once on both branches; a loop that is
// worth a team shares its indices over the threads outside a parallel region, and runs on the calling thread
// alone inside an active one (the bf16 chunked view's case) without starting a nested team.
#include "kernels/cpu/parallel.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

namespace cleave::kernels::cpu::parallel_loop_test {
namespace {

TEST(ParallelLoop, EveryIndexOnceOnBothBranches) {
  for (bool cond : {false, true}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      CLEAVE_PARALLEL_FOR(i, n, cond, hits[static_cast<size_t>(i)] += 1;)
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << "index " << i << " cond " << cond;
    }
  }
}

TEST(ParallelLoop, SharesOutsideARegionAndStaysOnTheCallerInsideOne) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  EXPECT_TRUE(detail::parallel_here(true));
  EXPECT_FALSE(detail::parallel_here(false));
  const int64_t n = 64;
  std::vector<int> owner(static_cast<size_t>(n), -1);
  CLEAVE_PARALLEL_FOR(i, n, true, owner[static_cast<size_t>(i)] = omp_get_thread_num();)
  bool second_thread = false;
  for (int t : owner) second_thread |= t == 1;
  if (omp_get_max_threads() > 1) {
    EXPECT_TRUE(second_thread) << "outside a region the loop should use the team";
  }

  std::vector<std::vector<int>> inner(2, std::vector<int>(static_cast<size_t>(n), -1));
  std::vector<int> here(2, -1), levels(2, -1);
#pragma omp parallel num_threads(2)
  {
    const int me = omp_get_thread_num();
    here[static_cast<size_t>(me)] = detail::parallel_here(true) ? 1 : 0;
    std::vector<int>& mine = inner[static_cast<size_t>(me)];
    CLEAVE_PARALLEL_FOR(i, n, true, mine[static_cast<size_t>(i)] = omp_get_thread_num();
                        levels[static_cast<size_t>(me)] = omp_get_level();)
  }
  omp_set_num_threads(saved);
  for (int me = 0; me < 2; ++me) {
    if (here[static_cast<size_t>(me)] == -1) continue;  // the runtime gave the region one thread
    EXPECT_EQ(here[static_cast<size_t>(me)], 0) << "thread " << me;
    EXPECT_EQ(levels[static_cast<size_t>(me)], 1) << "thread " << me << " started a nested region";
    for (int t : inner[static_cast<size_t>(me)]) EXPECT_EQ(t, me) << "thread " << me;
  }
}

}  // namespace
}  // namespace cleave::kernels::cpu::parallel_loop_test
