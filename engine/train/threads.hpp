// Threads per rank and pinning: the one policy every command that computes follows (train, bench, profile,
// verify, generate: engine/cli/bootstrap.hpp), so `cleave profile` and `cleave bench` measure the conditions
// `cleave train` runs in.
//
// The rule: the CPU kernels' OpenMP team and OpenBLAS pool are sized so that all ranks on a node together use
// its cores once. A process the launcher bound to fewer cores than the node has (mpirun --bind-to core, Open
// MPI's default for np <= 2) uses exactly those and keeps the binding. Unbound, each rank gets cores / ranks on
// the node threads and is pinned to cores [local_rank * threads, (local_rank + 1) * threads) of the ones it may
// use, when every rank fits (ranks x threads <= cores). When ranks outnumber cores nothing is pinned, each
// rank gets one thread and `oversubscribed` is set (shared cores hide idle time; bench and profile say so).
// CLEAVE_THREADS overrides the thread count. Oversubscribed threads are catastrophic on few cores: a spinning
// or descheduled sibling turns every parallel region into a wait (measured 10-35x slower steps with 4 ranks x 2
// threads on 2 cores).
//
// OpenMP's wait policy follows from the same numbers plus what else runs (choose_omp_wait_policy): idle threads
// spin ("active") when every thread of every rank on the node has a core of its own (ranks x threads <= cores)
// and no thread outside this job was runnable when this one started; they sleep ("passive") when cores are
// shared, where a spinning thread takes the core the thread with the work needs. Measured on the 2-core
// development machine (benchmarks/train/RESULTS-2026-11-28-wait-policy.md, small GPT at 1 rank x 2 threads):
// active 1.03-1.9x passive on an otherwise idle machine, 0.3-0.4x with a compile job beside it.
// "Outside this job" is the measurement's point: /proc/stat's procs_running counts every runnable thread,
// this process's own included, and at the probe this process already has more than one: OpenBLAS's pthread
// build starts its worker threads in its library constructor, before main, and they spin runnable for their
// first moments (on the 2-vCPU Intel VM every idle start read "1 thread busy elsewhere" from that worker and
// chose passive: benchmarks/train/RESULTS-2026-12-01-j-wait-policy-probe.md). So each sample subtracts the
// runnable threads of this process and of the node's other ranks (processes with this one's parent and
// executable, when a launcher says there are others), read from /proc/<pid>/task/<tid>/stat, and the median
// of the samples ignores a task runnable for only a moment (the launcher finishing its start-up, a kernel
// thread). libgomp reads OMP_WAIT_POLICY at load, so engine/cli/runtime_env.cpp exports the choice and
// re-executes the binary first thing in main; omp_wait_policy_for_node() gives it the inputs the placement
// below will use. Load that starts after this process is not seen: export OMP_WAIT_POLICY=passive on a
// machine shared with later work.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/enum_names.hpp"

namespace cleave::train {

struct ThreadPlacement {
  int cores = 1;               // the node's online cores
  int ranks_on_node = 1;       // from the launcher's local size (1 when not launched by one)
  int local_rank = 0;
  int threads = 1;             // the CPU kernels' thread count
  bool oversubscribed = false; // ranks_on_node > cores
  std::string binding;         // "pinned to cores 2-3", "bound by the launcher to 1 core", "not pinned (...)"
};

// The thread count the rule gives (pure): `usable` = cores this process may run on (its affinity mask),
// `online` = the node's online cores, `forced` = CLEAVE_THREADS (<= 0: not set).
int threads_per_rank(int usable, int online, int ranks_on_node, int forced);

// OMP_WAIT_POLICY's values, by the names the variable takes.
enum class OmpWaitPolicy { kActive, kPassive };
constexpr std::array<EnumName<OmpWaitPolicy>, 2> enum_names(OmpWaitPolicy) {
  return {{{OmpWaitPolicy::kActive, "active"}, {OmpWaitPolicy::kPassive, "passive"}}};
}

// kActive when ranks_on_node x threads_per_rank + busy_elsewhere <= cores (no thread shares a core), else
// kPassive. busy_elsewhere: threads outside this job that were runnable at start (busy_elsewhere_from_samples).
// Pure.
struct WaitPolicyChoice {
  OmpWaitPolicy policy = OmpWaitPolicy::kPassive;
  std::string reason;  // "1 rank x 2 threads on 2 cores, 0 threads busy elsewhere at start: no core shared, ..."
};
WaitPolicyChoice choose_omp_wait_policy(int ranks_on_node, int threads_per_rank, int cores, int busy_elsewhere);

// The runnable tasks in /proc/stat's text ("procs_running N"); nullopt when the line is missing. Pure.
std::optional<int> procs_running_from_stat(std::string_view stat_text);

// The fields of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat text the probe reads: "pid (comm) state ppid
// ..."; the comm may hold spaces and parentheses (the last ')' ends it). nullopt when the text is not of that
// form. Pure.
struct TaskStat {
  int pid = 0;
  char state = '?';  // 'R' runnable (running or waiting for a core), 'S' sleeping, ...
  int ppid = 0;
};
std::optional<TaskStat> task_stat_from_text(std::string_view text);

// A process on the node as one probe sample saw it: its pid, its parent, its executable (/proc/<pid>/exe) and
// how many of its threads were runnable.
struct ProcessLoad {
  int pid = 0;
  int ppid = 0;
  std::string exe;
  int runnable_threads = 0;
};

// The runnable threads that belong to this job: those of `self` and, when the launcher says the node has
// other ranks (ranks_on_node > 1), of `others` that share self's parent and executable (the other ranks;
// an independent run beside this one has another parent or another executable, and counts as load). Pure.
int this_job_runnable(const ProcessLoad& self, const std::vector<ProcessLoad>& others, int ranks_on_node);

// One probe sample: /proc/stat's procs_running and this job's runnable threads read right after it.
struct LoadSample {
  int procs_running = 0;
  int this_job_runnable = 0;
};

// busy_elsewhere from the samples: per sample, procs_running less this job's runnable threads (never below 0);
// the lower median of the samples, so a thread counts when it was runnable in at least half of them and a
// moment's blip does not (0 when there are no samples). Pure.
int busy_elsewhere_from_samples(const std::vector<LoadSample>& samples);

// choose_omp_wait_policy for this process, from the launcher's environment, the affinity mask, CLEAVE_THREADS
// (the inputs place_threads_for_node reads) and busy_elsewhere_from_samples of kLoadSamples samples of
// /proc/stat and /proc/<pid>/task kLoadSampleGapUs apart. Callable before main's work (no MPI).
inline constexpr int kLoadSamples = 7;
inline constexpr int kLoadSampleGapUs = 2000;
WaitPolicyChoice omp_wait_policy_for_node();

// Applies the rule above (ranks on the node from the launcher's environment), pins this process where it
// allows, configures the kernels' thread pools and returns what it chose. Call once per process, before
// anything computes.
ThreadPlacement place_threads_for_node();

// place_threads_for_node().threads: for tests and tools that need only the count.
int configure_threads_for_node();

}  // namespace cleave::train
