// The thread rule's pure halves (engine/train/threads.hpp): threads per rank from the cores this process may use,
// the node's cores, the ranks on the node and CLEAVE_THREADS; and OpenMP's wait policy, "active" only when no
// two threads (the node's ranks' and other processes' running at start) share a core, with the load probe's
// parts (this job's runnable threads told apart from the rest, the median of the samples) on recorded node
// shapes, /proc texts and samples, never on the machine running the test.
#include "engine/train/threads.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace cleave::train::threads_test {
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

TEST(ThreadRule, TaskStatFromText) {
  const auto t = task_stat_from_text("3210 (cleave) R 3205 3205 1862 34816 3205 4194304 150 0 0 0 0 0 0 0 20 0 2\n");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->pid, 3210);
  EXPECT_EQ(t->state, 'R');
  EXPECT_EQ(t->ppid, 3205);
  // A comm with spaces and parentheses: the last ')' ends it.
  const auto odd = task_stat_from_text("77 (tmux: (server) x) S 1 77 77 0 -1 4194560");
  ASSERT_TRUE(odd.has_value());
  EXPECT_EQ(odd->pid, 77);
  EXPECT_EQ(odd->state, 'S');
  EXPECT_EQ(odd->ppid, 1);
  EXPECT_EQ(task_stat_from_text("2 (kthreadd) S 0 0 0")->ppid, 0);
  EXPECT_EQ(task_stat_from_text(""), std::nullopt);
  EXPECT_EQ(task_stat_from_text("12 (cleave"), std::nullopt);
  EXPECT_EQ(task_stat_from_text("12 (cleave) R"), std::nullopt);
  EXPECT_EQ(task_stat_from_text("x (cleave) R 1 2"), std::nullopt);
  EXPECT_EQ(task_stat_from_text("12 (cleave) R ppid 2"), std::nullopt);
}

// Recorded on the 2-vCPU Intel VM (benchmarks/train/RESULTS-2026-12-01-j-wait-policy-probe.md): `cleave train` at the
// probe has two runnable threads of its own, its main thread and OpenBLAS's pthread worker, which the library's
// constructor started before main and which spins at first.
const std::string kExe = "/work/main/build/bin/cleave";

TEST(ThreadRule, ThisJobIsThisProcessAndTheRanksOfItsLauncher) {
  const ProcessLoad self{.pid = 3210, .ppid = 3205, .exe = kExe, .runnable_threads = 2};
  const ProcessLoad rank{.pid = 3209, .ppid = 3205, .exe = kExe, .runnable_threads = 2};  // the other rank
  const ProcessLoad launcher{.pid = 3205, .ppid = 1862, .exe = "/usr/bin/orterun", .runnable_threads = 1};
  const ProcessLoad other_run{.pid = 4001, .ppid = 4000, .exe = kExe, .runnable_threads = 2};  // another mpirun's rank
  const ProcessLoad compile{.pid = 2279, .ppid = 3205, .exe = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus",
                            .runnable_threads = 1};
  const std::vector<ProcessLoad> others{rank, launcher, other_run, compile};
  EXPECT_EQ(this_job_runnable(self, {}, 1), 2);           // alone: both of its threads, not 1
  EXPECT_EQ(this_job_runnable(self, others, 2), 4);       // mpirun -np 2 --bind-to none: both ranks' threads
  EXPECT_EQ(this_job_runnable(self, others, 1), 2);       // no launcher: a same-binary process beside it is load
  EXPECT_EQ(this_job_runnable(self, {self}, 2), 2);       // this process listed again is not a second rank
  ProcessLoad unknown = rank;
  unknown.exe.clear();                                    // an executable we may not read is not ours
  EXPECT_EQ(this_job_runnable(self, {unknown}, 2), 2);
}

TEST(ThreadRule, BusyElsewhereIsTheMedianOfProcsRunningLessThisJob) {
  // The idle VM: procs_running 2 = this process's main thread and OpenBLAS's worker; one sample also saw the
  // launching shell. Nothing else runs.
  const std::vector<LoadSample> idle{{2, 2}, {3, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}};
  EXPECT_EQ(busy_elsewhere_from_samples(idle), 0);
  EXPECT_EQ(choose_omp_wait_policy(1, 2, 2, busy_elsewhere_from_samples(idle)).policy, OmpWaitPolicy::kActive);
  // A busy loop beside the run: one more runnable thread in every sample.
  const std::vector<LoadSample> loop{{3, 2}, {3, 2}, {4, 2}, {3, 2}, {3, 2}, {3, 2}, {3, 2}};
  EXPECT_EQ(busy_elsewhere_from_samples(loop), 1);
  EXPECT_EQ(choose_omp_wait_policy(1, 2, 2, busy_elsewhere_from_samples(loop)).policy, OmpWaitPolicy::kPassive);
  // Another training run in passive mode: its two threads sleep now and then; runnable in most samples.
  const std::vector<LoadSample> run{{4, 2}, {3, 2}, {4, 2}, {4, 2}, {2, 2}, {4, 2}, {3, 2}};
  EXPECT_EQ(busy_elsewhere_from_samples(run), 2);
  // A moment's blip (the launcher finishing its start-up) in fewer than half the samples is not load.
  const std::vector<LoadSample> blip{{5, 2}, {4, 2}, {4, 2}, {2, 2}, {2, 2}, {2, 2}, {2, 2}};
  EXPECT_EQ(busy_elsewhere_from_samples(blip), 0);
  // A sample whose own threads were counted after procs_running (a thread woke between the reads) is not below 0.
  EXPECT_EQ(busy_elsewhere_from_samples({{1, 2}}), 0);
  EXPECT_EQ(busy_elsewhere_from_samples({}), 0);
  EXPECT_EQ(busy_elsewhere_from_samples({{4, 2}, {2, 2}}), 0);  // even count: the lower median
}

}  // namespace
}  // namespace cleave::train::threads_test
