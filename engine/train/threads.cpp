// See threads.hpp.
#include "engine/train/threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/launch_env.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

ThreadPlacement place_threads_for_node() {
  ThreadPlacement p;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) cpus.push_back(0);
  const int usable = static_cast<int>(cpus.size());
  p.cores = std::max(usable, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (const auto local = comm::local_rank_from_env(comm::process_env())) {
    p.local_rank = local->local_rank;
    p.ranks_on_node = std::max(1, local->local_size);
  }
  p.oversubscribed = p.ranks_on_node > p.cores;
  int threads = 0;
  if (const char* forced = std::getenv("CLEAVE_THREADS")) threads = std::atoi(forced);
  if (p.oversubscribed) {
    p.binding = fmt::format("not pinned ({} ranks, {} cores)", p.ranks_on_node, p.cores);
  } else if (usable < p.cores) {
    p.binding = fmt::format("bound by the launcher to {} core(s)", usable);
    if (threads <= 0) threads = usable;
  } else {
    if (threads <= 0) threads = std::max(1, p.cores / p.ranks_on_node);
    const int first = p.local_rank * threads;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (first + threads <= usable) {
      for (int i = first; i < first + threads; ++i) CPU_SET(cpus[static_cast<std::size_t>(i)], &mine);
    }
    if (first + threads <= usable && sched_setaffinity(0, sizeof mine, &mine) == 0) {
      p.binding = threads == 1 ? fmt::format("pinned to core {}", cpus[static_cast<std::size_t>(first)])
                               : fmt::format("pinned to cores {}-{}", cpus[static_cast<std::size_t>(first)],
                                             cpus[static_cast<std::size_t>(first + threads - 1)]);
    } else {
      p.binding = fmt::format("not pinned ({} ranks x {} threads on {} cores)", p.ranks_on_node, threads, usable);
    }
  }
  if (threads <= 0) threads = std::max(1, p.cores / p.ranks_on_node);
  ops::configure_cpu_threads(threads);
  p.threads = threads;
  return p;
}

int configure_threads_for_node() { return place_threads_for_node().threads; }

}  // namespace cleave::train
