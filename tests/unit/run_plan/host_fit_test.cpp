// Host fit (engine/run_plan/host_fit.hpp): the ranks on one host against the memory it allows (physical or a cgroup's
// limit), with the memory sizes injected (no test reads this machine's). The rule: refused past kHostMemoryShare (90%)
// of that memory; the need is the least the host's ranks can hold (the smallest per-rank plans, each pp rank's held by
// tp x cp x dp ranks); the message names the numbers, where the figure came from and the fix. host_need reads the
// memory plan per pp rank.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/run_plan/host_fit.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan::host_fit_test {
namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

HostNeed need_of(std::vector<std::int64_t> per_pp_rank, int ranks_per_pp_rank) {
  HostNeed need;
  need.rank_bytes = std::move(per_pp_rank);
  need.ranks_per_pp_rank = ranks_per_pp_rank;
  need.what = "the memory plan";
  need.largest = "parameters 1.00 GiB, total 3.00 GiB";
  return need;
}

TEST(HostFit, TheUsableShareIsNinetyPercent) {
  EXPECT_EQ(kHostMemoryShare, 0.9);
  EXPECT_EQ(usable_host_bytes(1000), 900);
  EXPECT_EQ(usable_host_bytes(10 * kGiB), 9 * kGiB);
}

TEST(HostFit, TheNeedIsTheLeastTheHostsRanksCanHold) {
  // pp 3 with per-rank plans 3, 1, 2 GiB, each held by 2 ranks (world 6).
  const HostNeed need = need_of({3 * kGiB, 1 * kGiB, 2 * kGiB}, 2);
  EXPECT_EQ(least_host_bytes(need, 1), 1 * kGiB);
  EXPECT_EQ(least_host_bytes(need, 2), 2 * kGiB);  // both ranks of pp rank 1
  EXPECT_EQ(least_host_bytes(need, 3), 4 * kGiB);  // then one of pp rank 2
  EXPECT_EQ(least_host_bytes(need, 6), 12 * kGiB);  // the whole world
  EXPECT_EQ(least_host_bytes(need, 8), 12 * kGiB);  // no more ranks than the world
  // Far past any machine: saturates, never wraps into a figure that fits.
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max() / 2 + 1;
  EXPECT_EQ(least_host_bytes(need_of({huge}, 4), 4), std::numeric_limits<std::int64_t>::max());
}

TEST(HostFit, FitsUpToTheShareAndIsRefusedPastIt) {
  const HostMemory host{10 * kGiB, "its physical memory, MemTotal in /proc/meminfo", 2};
  const std::int64_t usable = usable_host_bytes(host.limit_bytes);
  // Two ranks of one pp rank: 2 x the plan against 9 GiB.
  EXPECT_EQ(host_fit_violation(need_of({usable / 2}, 2), host), "");
  const std::string m = host_fit_violation(need_of({usable / 2 + 1}, 2), host);
  ASSERT_FALSE(m.empty());
  EXPECT_NE(m.find("memory: the 2 ranks on this host need 9.00 GiB of host memory (the memory plan: 2 ranks x about "
                   "4.50 GiB each (parameters 1.00 GiB, total 3.00 GiB)), but this host allows 10.00 GiB of memory "
                   "(its physical memory, MemTotal in /proc/meminfo) and a run may plan 90% of it, 9.00 GiB"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("nothing was started"), std::string::npos) << m;
  EXPECT_NE(m.find("OOM killer"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.pipeline_model_parallel_size"), std::string::npos) << m;
  EXPECT_NE(m.find("--memory-limit SIZE` with SIZE at most 4.50 GiB (this host's share per rank)"), std::string::npos)
      << m;
  // The same plan on a host of one rank fits.
  EXPECT_EQ(host_fit_violation(need_of({usable / 2 + 1}, 2), {10 * kGiB, "test", 1}), "");
}

TEST(HostFit, UnevenPlansNameTheRangeAndTheLargestRank) {
  const std::string m = host_fit_violation(need_of({8 * kGiB, 6 * kGiB}, 1), {5 * kGiB, "test", 1});
  ASSERT_FALSE(m.empty());
  EXPECT_NE(m.find("the 1 rank on this host needs 6.00 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("(the memory plan: the least 1 rank of the world holds: per-rank plans from 6.00 GiB to 8.00 GiB, "
                   "pp rank 0 the largest (parameters 1.00 GiB, total 3.00 GiB))"),
            std::string::npos)
      << m;
  // Two ranks on the host of a pp 2 world whose smaller plan fits alone: both together do not.
  EXPECT_EQ(host_fit_violation(need_of({8 * kGiB, 3 * kGiB}, 1), {10 * kGiB, "test", 1}), "");
  EXPECT_NE(host_fit_violation(need_of({8 * kGiB, 3 * kGiB}, 1), {10 * kGiB, "test", 2}), "");
}

TEST(HostFit, ACgroupLimitIsTheFigureAndIsNamed) {
  // In a container the host allows its cgroup's limit (engine/core/physical_memory.hpp): 8 GiB of a 64 GiB machine.
  const HostMemory host{8 * kGiB,
                        "the cgroup limit in /sys/fs/cgroup/memory.max, below its physical memory 64.00 GiB (MemTotal "
                        "in /proc/meminfo)",
                        1};
  const std::int64_t usable = usable_host_bytes(host.limit_bytes);
  EXPECT_EQ(host_fit_violation(need_of({usable}, 1), host), "");
  const std::string m = host_fit_violation(need_of({usable + 1}, 1), host);
  EXPECT_NE(m.find("but this host allows 8.00 GiB of memory (the cgroup limit in /sys/fs/cgroup/memory.max, below its "
                   "physical memory 64.00 GiB (MemTotal in /proc/meminfo)) and a run may plan 90% of it, 7.20 GiB"),
            std::string::npos)
      << m;
}

TEST(HostFit, AnUnknownHostIsNotChecked) {
  EXPECT_EQ(host_fit_violation(need_of({std::numeric_limits<std::int64_t>::max()}, 1), {0, "", 1}), "");
}

TEST(HostFit, TheNeedIsTheMemoryPlanOfEachPpRank) {
  config::RunConfig c = config::load_config("", {"parallel.pipeline_model_parallel_size=2"});
  c.resolve(4);  // dp 2
  const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
  const CpuKernels cpu = unresolved_cpu_kernels(c);
  const HostNeed need = host_need(plan, c, cpu);
  ASSERT_EQ(need.rank_bytes.size(), 2U);
  EXPECT_EQ(need.ranks_per_pp_rank, 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(need.rank_bytes[static_cast<std::size_t>(r)], estimate_rank_memory(plan, c, r, cpu).total()) << r;
    EXPECT_GT(need.rank_bytes[static_cast<std::size_t>(r)], 0) << r;
  }
  EXPECT_NE(need.largest.find("total "), std::string::npos) << need.largest;
}

TEST(HostFit, OnCudaTheNeedIsThePageLockedHostMemory) {
  // Device memory is the GPU's; what a cuda rank holds on the host is its pinned staging (MemoryPlan::host_pinned).
  config::RunConfig c = config::load_config("", {"device.type=\"cuda\""});
  c.resolve(1);
  const Plan plan = make_plan(c, static_cast<int>(c.resolved_batch().gradient_accumulation_steps), 0);
  const CpuKernels cpu = unresolved_cpu_kernels(c);
  const HostNeed need = host_need(plan, c, cpu);
  const MemoryPlan m = estimate_rank_memory(plan, c, 0, cpu);
  ASSERT_GT(m.host_pinned, 0);
  ASSERT_NE(m.host_pinned, m.total());
  EXPECT_EQ(need.rank_bytes, std::vector<std::int64_t>{m.host_pinned});
  EXPECT_EQ(need.what, "the memory plan's page-locked host memory");
}

}  // namespace
}  // namespace cleave::run_plan::host_fit_test
