// The thread rule's pure halves (engine/train/threads.hpp): threads per rank from the cores this process may use,
// the node's cores, the ranks on the node and CLEAVE_THREADS; and OpenMP's wait policy, "active" only when no
// two threads (the node's ranks' and other processes' running at start) share a core, on recorded node shapes
// and /proc/stat texts, never on the machine running the test.
#include "engine/train/threads.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace cleave::train {
namespace {

TEST(ThreadRule, ThreadsPerRank) {
  EXPECT_EQ(threads_per_rank(/*usable=*/2, /*online=*/2, /*ranks=*/1, /*forced=*/0), 2);
  EXPECT_EQ(threads_per_rank(2, 2, 2, 0), 1);
  EXPECT_EQ(threads_per_rank(16, 16, 4, 0), 4);
  EXPECT_EQ(threads_per_rank(1, 2, 2, 0), 1);    // mpirun --bind-to core: the launcher's core
  EXPECT_EQ(threads_per_rank(4, 16, 2, 0), 4);   // bound to 4 of 16 cores: those 4
  EXPECT_EQ(threads_per_rank(2, 2, 4, 0), 1);    // ranks outnumber cores: one thread each
  EXPECT_EQ(threads_per_rank(2, 2, 1, 3), 3);    // CLEAVE_THREADS wins
  EXPECT_EQ(threads_per_rank(2, 2, 0, 0), 2);    // a launcher that gives no local size counts as one rank
}

TEST(ThreadRule, WaitPolicyIsActiveOnlyWhenNoCoreIsShared) {
  EXPECT_EQ(choose_omp_wait_policy(1, 2, 2, 0).policy, OmpWaitPolicy::kActive);   // the small GPT peer run: 1 rank x 2 threads
  EXPECT_EQ(choose_omp_wait_policy(2, 1, 2, 0).policy, OmpWaitPolicy::kActive);
  EXPECT_EQ(choose_omp_wait_policy(4, 4, 16, 0).policy, OmpWaitPolicy::kActive);
  EXPECT_EQ(choose_omp_wait_policy(2, 2, 2, 0).policy, OmpWaitPolicy::kPassive);  // 4 threads on 2 cores
  EXPECT_EQ(choose_omp_wait_policy(4, 1, 2, 0).policy, OmpWaitPolicy::kPassive);  // mpirun --oversubscribe -np 4 on 2 cores
  EXPECT_EQ(choose_omp_wait_policy(1, 3, 2, 0).policy, OmpWaitPolicy::kPassive);  // CLEAVE_THREADS=3 on 2 cores
  const WaitPolicyChoice c = choose_omp_wait_policy(4, 1, 2, 0);
  EXPECT_NE(c.reason.find("4 ranks x 1 thread on 2 cores, 0 threads busy elsewhere"), std::string::npos) << c.reason;
  const std::string one = choose_omp_wait_policy(1, 2, 1, 0).reason;
  EXPECT_NE(one.find("1 rank x 2 threads on 1 core,"), std::string::npos) << one;
}

TEST(ThreadRule, WaitPolicyCountsOtherProcessesRunningAtStart) {
  // A compile job beside the run (measured: active 0.3-0.4x passive then).
  EXPECT_EQ(choose_omp_wait_policy(1, 2, 2, 1).policy, OmpWaitPolicy::kPassive);
  EXPECT_EQ(choose_omp_wait_policy(1, 2, 4, 2).policy, OmpWaitPolicy::kActive);   // 4 cores: room for both
  EXPECT_EQ(choose_omp_wait_policy(1, 2, 4, 3).policy, OmpWaitPolicy::kPassive);
  EXPECT_EQ(choose_omp_wait_policy(1, 2, 2, -1).policy, OmpWaitPolicy::kActive);  // a negative count means none
  EXPECT_NE(choose_omp_wait_policy(1, 2, 2, 1).reason.find("1 thread busy elsewhere"), std::string::npos);
}

TEST(ThreadRule, ProcsRunningFromStat) {
  const std::string stat = "cpu  1 2 3 4\ncpu0 1 2 3 4\nctxt 99\nprocs_running 3\nprocs_blocked 0\n";
  EXPECT_EQ(procs_running_from_stat(stat), 3);
  EXPECT_EQ(procs_running_from_stat("cpu 1\nprocs_running 12"), 12);
  EXPECT_EQ(procs_running_from_stat("cpu 1\nprocs_blocked 3\n"), std::nullopt);
  EXPECT_EQ(procs_running_from_stat("cpu 1\nprocs_running x\n"), std::nullopt);
  EXPECT_EQ(procs_running_from_stat(""), std::nullopt);
}

TEST(ThreadRule, TheRuleAndThePolicyAgreeOnRecordedNodes) {
  // Whatever the placement gives, the policy it implies: passive exactly when ranks outnumber cores or a
  // forced thread count oversubscribes them.
  struct Node {
    int usable, online, ranks, forced;
    OmpWaitPolicy policy;
  };
  for (const Node& n : {Node{2, 2, 1, 0, OmpWaitPolicy::kActive}, Node{2, 2, 2, 0, OmpWaitPolicy::kActive}, Node{1, 2, 2, 0, OmpWaitPolicy::kActive},
                        Node{2, 2, 3, 0, OmpWaitPolicy::kPassive}, Node{8, 8, 2, 8, OmpWaitPolicy::kPassive}, Node{8, 8, 2, 4, OmpWaitPolicy::kActive}}) {
    const int threads = threads_per_rank(n.usable, n.online, n.ranks, n.forced);
    EXPECT_EQ(choose_omp_wait_policy(n.ranks, threads, std::max(n.usable, n.online), 0).policy, n.policy)
        << n.usable << "/" << n.online << " cores, " << n.ranks << " ranks, forced " << n.forced;
  }
}

}  // namespace
}  // namespace cleave::train
