// See bench_machine.hpp.
#include "engine/bench/bench_machine.hpp"

#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "engine/core/english.hpp"
#include "engine/train/threads.hpp"

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
  return fmt::format("{}, {}, {} on the node x {} per rank, {}, MPI single copy {}, progress thread {}{}", cpu_model,
                     count_of(cores, "core"), count_of(ranks_on_node, "rank"), count_of(threads_per_rank, "thread"),
                     binding, mpi_single_copy,
                     mpi_progress_thread ? "on" : "off",
                     oversubscribed ? " -- OVERSUBSCRIBED: ranks share cores, measured idle time is hidden" : "");
}

BenchMachine place_rank_for_bench() {
  BenchMachine m;
  m.cpu_model = cpu_model_name();
  if (const char* copy = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism")) m.mpi_single_copy = copy;
  // The trainer's policy (engine/train/threads.hpp), so the bench measures what `cleave train` runs.
  const train::ThreadPlacement placement = train::place_threads_for_node();
  m.cores = placement.cores;
  m.ranks_on_node = placement.ranks_on_node;
  m.local_rank = placement.local_rank;
  m.threads_per_rank = placement.threads;
  m.oversubscribed = placement.oversubscribed;
  m.binding = placement.binding;
  return m;
}

}  // namespace cleave::bench
