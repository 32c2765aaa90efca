// See bench_machine.hpp.
#include "engine/bench/bench_machine.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/launch_env.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::bench {
namespace {

std::string cpu_model_name() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

}  // namespace

std::string single_copy_warning(const BenchMachine& machine) {
  if (machine.mpi_single_copy != "none" || machine.mpi_progress_thread) return {};
  return "Open MPI runs with btl_vader_single_copy_mechanism=none and no progress thread: a pipeline message above "
         "the 4 KiB eager limit moves only while the sending rank is inside an MPI call, so a receiver waits for "
         "the sender's next action and schedules with many crossings lose their gain (measured on a 2-core "
         "machine: zb_v 3,605 tok/s with none, 5,151 with cma; 1f1b 4,439 vs 4,532). Set parallel.p2p_progress "
         "to \"auto\" (needs MPI_THREAD_MULTIPLE) or, where the container allows ptrace between the ranks, "
         "OMPI_MCA_btl_vader_single_copy_mechanism=cma (docs/multi-rank.md).";
}

std::string BenchMachine::describe() const {
  return fmt::format("{}, {} core(s), {} rank(s) on the node x {} thread(s) per rank, {}, MPI single copy {}, "
                     "progress thread {}{}",
                     cpu_model, cores, ranks_on_node, threads_per_rank, binding, mpi_single_copy,
                     mpi_progress_thread ? "on" : "off",
                     oversubscribed ? " -- OVERSUBSCRIBED: ranks share cores, measured idle time is hidden" : "");
}

BenchMachine place_rank_for_bench() {
  BenchMachine m;
  m.cpu_model = cpu_model_name();
  if (const char* copy = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism")) m.mpi_single_copy = copy;
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
  m.cores = std::max(usable, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (const auto local = comm::local_rank_from_env(comm::process_env())) {
    m.local_rank = local->local_rank;
    m.ranks_on_node = std::max(1, local->local_size);
  }
  m.oversubscribed = m.ranks_on_node > m.cores;
  int threads = 0;
  if (const char* forced = std::getenv("CLEAVE_THREADS")) threads = std::atoi(forced);
  if (m.oversubscribed) {
    m.binding = fmt::format("not pinned ({} ranks, {} cores)", m.ranks_on_node, m.cores);
  } else if (usable < m.cores) {
    // mpirun binds to cores when ranks fit (Open MPI's default for np <= 2, or --bind-to core): keep it.
    m.binding = fmt::format("bound by the launcher to {} core(s)", usable);
    if (threads <= 0) threads = usable;
  } else {
    if (threads <= 0) threads = std::max(1, m.cores / m.ranks_on_node);
    const int first = m.local_rank * threads;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (first + threads <= usable) {
      for (int i = first; i < first + threads; ++i) CPU_SET(cpus[static_cast<std::size_t>(i)], &mine);
    }
    if (first + threads <= usable && sched_setaffinity(0, sizeof mine, &mine) == 0) {
      m.binding = threads == 1 ? fmt::format("pinned to core {}", cpus[static_cast<std::size_t>(first)])
                               : fmt::format("pinned to cores {}-{}", cpus[static_cast<std::size_t>(first)],
                                             cpus[static_cast<std::size_t>(first + threads - 1)]);
    } else {
      m.binding = fmt::format("not pinned ({} ranks x {} threads on {} cores)", m.ranks_on_node, threads, usable);
    }
  }
  if (threads <= 0) threads = std::max(1, m.cores / m.ranks_on_node);
  ops::configure_cpu_threads(threads);
  m.threads_per_rank = threads;
  return m;
}

}  // namespace cleave::bench
