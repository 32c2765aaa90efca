// See threads.hpp.
#include "engine/train/threads.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "engine/comm/launch_env.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

int configure_threads_for_node() {
  int threads = 0;
  if (const char* forced = std::getenv("CLEAVE_THREADS")) threads = std::atoi(forced);
  if (threads <= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    const int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    const int node = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const auto local = comm::local_rank_from_env(comm::process_env());
    const int ranks_here = local && local->local_size > 0 ? local->local_size : 1;
    // Bound by the launcher (mpirun binds to cores when not oversubscribed): use exactly the cores given.
    // Unbound: share the node's cores among its ranks.
    threads = usable < node ? usable : std::max(1, node / ranks_here);
  }
  ops::configure_cpu_threads(threads);
  return threads;
}

}  // namespace cleave::train
