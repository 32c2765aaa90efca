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
// and no other process was running when this one started; they sleep ("passive") when cores are shared, where
// a spinning thread takes the core the thread with the work needs. Measured on the 2-core development machine
// (benchmarks/train/RESULTS-2026-11-28-wait-policy.md, small GPT at 1 rank x 2 threads): active 1.03-1.9x passive
// on an otherwise idle machine, 0.3-0.4x with a compile job beside it. libgomp reads OMP_WAIT_POLICY at load,
// so engine/cli/runtime_env.cpp exports the choice and re-executes the binary first thing in main;
// omp_wait_policy_for_node() gives it the inputs the placement below will use. Load that starts after this
// process is not seen: export OMP_WAIT_POLICY=passive on a machine shared with later work.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

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
// kPassive. busy_elsewhere: threads of other processes that were runnable at start. Pure.
struct WaitPolicyChoice {
  OmpWaitPolicy policy = OmpWaitPolicy::kPassive;
  std::string reason;  // "1 rank x 2 threads on 2 cores, 0 threads busy elsewhere at start: no core shared, ..."
};
WaitPolicyChoice choose_omp_wait_policy(int ranks_on_node, int threads_per_rank, int cores, int busy_elsewhere);

// The runnable tasks in /proc/stat's text ("procs_running N"); nullopt when the line is missing. Pure.
std::optional<int> procs_running_from_stat(std::string_view stat_text);

// choose_omp_wait_policy for this process, from the launcher's environment, the affinity mask, CLEAVE_THREADS
// (the inputs place_threads_for_node reads) and the fewest runnable tasks of 3 samples of /proc/stat 1 ms apart,
// less this process and the node's other ranks. Callable before main's work (no MPI).
WaitPolicyChoice omp_wait_policy_for_node();

// Applies the rule above (ranks on the node from the launcher's environment), pins this process where it
// allows, configures the kernels' thread pools and returns what it chose. Call once per process, before
// anything computes.
ThreadPlacement place_threads_for_node();

// place_threads_for_node().threads: for tests and tools that need only the count.
int configure_threads_for_node();

}  // namespace cleave::train
