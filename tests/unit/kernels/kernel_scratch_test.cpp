// KernelScratch (kernels/cpu/kernel_scratch.hpp), the scratch a CPU kernel call borrows. Asserts: each thread of
// a call's team gets its own 64-byte aligned block, apart from the shared block and from every other thread's; the
// memory grows only for a call larger than any before (a repeated call reuses it); a second lease while one is
// live is refused; ScratchFor uses the given scratch, or its own when none is given or inside a parallel region.
#include "kernels/cpu/kernel_scratch.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <set>
#include <vector>

#include "engine/core/error.hpp"

namespace cleave::kernels::cpu::kernel_scratch_test {
namespace {

bool aligned64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

TEST(KernelScratch, EachThreadOfTheTeamGetsItsOwnAlignedBlock) {
  KernelScratch scratch;
  const std::size_t shared_bytes = 100, floats = 37;
  const KernelScratch::Lease lease = scratch.lease(shared_bytes, floats);
  const int slots = omp_get_max_threads();
  std::vector<float*> blocks(static_cast<std::size_t>(slots), nullptr);
  int team = 0;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
    blocks[static_cast<std::size_t>(omp_get_thread_num())] = lease.thread_block();
  }
  ASSERT_LE(team, slots);
  std::set<float*> distinct;
  const auto* shared_end = lease.shared() + shared_bytes;
  for (int t = 0; t < team; ++t) {
    float* b = blocks[static_cast<std::size_t>(t)];
    ASSERT_NE(b, nullptr) << "thread " << t;
    EXPECT_TRUE(aligned64(b)) << "thread " << t;
    EXPECT_GE(reinterpret_cast<const std::byte*>(b), shared_end) << "thread " << t << "'s block overlaps the shared";
    distinct.insert(b);
    for (int u = 0; u < t; ++u) {  // blocks [b, b + floats) do not overlap
      const float* o = blocks[static_cast<std::size_t>(u)];
      EXPECT_TRUE(b >= o + floats || o >= b + floats) << "threads " << u << " and " << t << " share memory";
    }
  }
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(team));
  EXPECT_TRUE(aligned64(lease.shared()));
  EXPECT_EQ(lease.thread_block(), blocks[0]) << "outside the team, block 0";
}

TEST(KernelScratch, GrowsOnlyForALargerCall) {
  KernelScratch scratch;
  EXPECT_EQ(scratch.growths(), 0u);
  { const KernelScratch::Lease lease = scratch.lease(256, 1000); }
  EXPECT_EQ(scratch.growths(), 1u);
  const std::size_t bytes = scratch.bytes();
  EXPECT_GE(bytes, 256u + static_cast<std::size_t>(omp_get_max_threads()) * 1000 * sizeof(float));
  for (int call = 0; call < 3; ++call) {
    const KernelScratch::Lease same = scratch.lease(256, 1000);
  }
  { const KernelScratch::Lease smaller = scratch.lease(0, 10); }
  EXPECT_EQ(scratch.growths(), 1u) << "a call no larger than an earlier one allocated";
  EXPECT_EQ(scratch.bytes(), bytes);
  { const KernelScratch::Lease larger = scratch.lease(256, 4000); }
  EXPECT_EQ(scratch.growths(), 2u);
  EXPECT_EQ(scratch.leases(), 6u);
}

TEST(KernelScratch, ASecondLiveLeaseIsRefused) {
  KernelScratch scratch;
  const KernelScratch::Lease first = scratch.lease(0, 16);
  EXPECT_THROW(static_cast<void>(scratch.lease(0, 16)), InternalError);
}

TEST(KernelScratch, ScratchForUsesTheGivenOneOutsideParallelRegions) {
  KernelScratch run;
  ScratchFor given(&run);
  EXPECT_EQ(&given.get(), &run);
  ScratchFor none(nullptr);
  EXPECT_NE(&none.get(), &run);
  bool inside_uses_own = true;
#pragma omp parallel num_threads(2)
  {
    ScratchFor nested(&run);
    if (omp_in_parallel() && &nested.get() == &run) {
#pragma omp atomic write
      inside_uses_own = false;
    }
  }
  EXPECT_TRUE(inside_uses_own) << "a call inside a parallel region borrowed the run's scratch";
}

}  // namespace
}  // namespace cleave::kernels::cpu::kernel_scratch_test
