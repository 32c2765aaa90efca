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
#pragma once

#include <string>

namespace cleave::train {

struct ThreadPlacement {
  int cores = 1;               // the node's online cores
  int ranks_on_node = 1;       // from the launcher's local size (1 when not launched by one)
  int local_rank = 0;
  int threads = 1;             // the CPU kernels' thread count
  bool oversubscribed = false; // ranks_on_node > cores
  std::string binding;         // "pinned to cores 2-3", "bound by the launcher to 1 core(s)", "not pinned (...)"
};

// Applies the rule above (ranks on the node from the launcher's environment), pins this process where it
// allows, configures the kernels' thread pools and returns what it chose. Call once per process, before
// anything computes.
ThreadPlacement place_threads_for_node();

// place_threads_for_node().threads: for tests and tools that need only the count.
int configure_threads_for_node();

}  // namespace cleave::train
