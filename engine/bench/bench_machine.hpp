// Where a benchmarking rank runs, decided before any compute thread exists by the same policy as training
// (engine/train/threads.hpp): how many cores the node has, how many ranks share it, how many threads each rank
// gets, and whether each rank could be pinned to cores of its own. Invariant: a rank is pinned only when every rank on the node gets its own cores
// (ranks x threads <= cores), and only to the cores [local_rank * threads, (local_rank + 1) * threads) of
// the ones this process may use; a binding the launcher already made (mpirun --bind-to core) is kept;
// when ranks outnumber cores nothing is pinned and `oversubscribed` is set,
// because shared cores hide idle time (a waiting rank's core runs its neighbour) and the bench says so.
#pragma once

#include <string>

namespace cleave::bench {

struct BenchMachine {
  std::string cpu_model;       // /proc/cpuinfo "model name", or "unknown"
  int cores = 1;               // the node's online cores
  int ranks_on_node = 1;       // from the launcher's local size (1 when not launched by one)
  int local_rank = 0;
  int threads_per_rank = 1;    // the CPU kernels' thread count
  bool oversubscribed = false; // ranks_on_node > cores
  std::string binding;         // "cores 2-3", "bound by the launcher to 1 core(s)", "not pinned (...)"
  // Open MPI's shared-memory single-copy mechanism (OMPI_MCA_btl_vader_single_copy_mechanism; "default"
  // when unset). "none" sends large messages by copy-in/copy-out, which moves only while the sending rank is
  // inside an MPI call: a peer waits for the sender's next action (see single_copy_warning).
  std::string mpi_single_copy = "default";
  // Whether the MPI communicator runs a progress thread (parallel.p2p_progress), which moves such messages
  // while the sender computes; set by the caller once the world exists.
  bool mpi_progress_thread = false;

  // One line for logs and reports: "AMD EPYC 7B13, 2 cores, 2 ranks x 1 thread, pinned".
  std::string describe() const;
};

// Places this rank by the trainer's rule (engine/train/threads.hpp place_threads_for_node: threads per rank,
// pinning, the kernels' thread pools) and describes the machine. Call once, before anything computes.
BenchMachine place_rank_for_bench();

// A warning when pipeline messages go without single copy and without a progress thread (empty otherwise).
std::string single_copy_warning(const BenchMachine& machine);

}  // namespace cleave::bench
