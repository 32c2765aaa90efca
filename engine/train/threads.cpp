// See threads.hpp.
#include "engine/train/threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/launch_env.hpp"
#include "engine/core/english.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::train {

namespace {

struct NodeView {
  std::vector<int> cpus;  // the cores this process may run on
  int online = 1;
  int ranks_on_node = 1;
  int local_rank = 0;
  int forced = 0;  // CLEAVE_THREADS
};

NodeView view_node() {
  NodeView v;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) v.cpus.push_back(c);
    }
  }
  if (v.cpus.empty()) v.cpus.push_back(0);
  v.online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (const auto local = comm::local_rank_from_env(comm::process_env())) {
    v.local_rank = local->local_rank;
    v.ranks_on_node = std::max(1, local->local_size);
  }
  if (const char* forced = std::getenv("CLEAVE_THREADS")) v.forced = std::atoi(forced);
  return v;
}

}  // namespace

int threads_per_rank(int usable, int online, int ranks_on_node, int forced) {
  if (forced > 0) return forced;
  const int cores = std::max(usable, online);
  const int ranks = std::max(1, ranks_on_node);
  if (ranks <= cores && usable < cores) return std::max(1, usable);  // bound by the launcher: its cores
  return std::max(1, cores / ranks);
}

WaitPolicyChoice choose_omp_wait_policy(int ranks_on_node, int threads, int cores, int busy_elsewhere) {
  const long long demand =
      static_cast<long long>(std::max(1, ranks_on_node)) * std::max(1, threads) + std::max(0, busy_elsewhere);
  const bool shared = demand > std::max(1, cores);
  return {shared ? OmpWaitPolicy::kPassive : OmpWaitPolicy::kActive,
          fmt::format("{} x {} on {}, {} busy elsewhere at start: {}", count_of(std::max(1, ranks_on_node), "rank"),
                      count_of(std::max(1, threads), "thread"), count_of(std::max(1, cores), "core"),
                      count_of(std::max(0, busy_elsewhere), "thread"),
                      shared ? "cores shared, idle threads sleep" : "no core shared, idle threads spin")};
}

std::optional<int> procs_running_from_stat(std::string_view stat_text) {
  constexpr std::string_view kKey = "\nprocs_running ";
  const std::size_t at = stat_text.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  int value = 0;
  bool digits = false;
  for (std::size_t i = at + kKey.size(); i < stat_text.size() && stat_text[i] >= '0' && stat_text[i] <= '9'; ++i) {
    value = value * 10 + (stat_text[i] - '0');
    digits = true;
  }
  return digits ? std::optional<int>(value) : std::nullopt;
}

WaitPolicyChoice omp_wait_policy_for_node() {
  const NodeView v = view_node();
  const int usable = static_cast<int>(v.cpus.size());
  const int cores = std::max(usable, v.online);
  // Runnable tasks now, this process's one thread included; the fewest of a few samples ignores a short burst.
  std::optional<int> running;
  for (int sample = 0; sample < 3; ++sample) {
    if (sample > 0) usleep(1000);
    std::ifstream stat("/proc/stat");
    const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    if (const auto now = procs_running_from_stat(text)) running = running ? std::min(*running, *now) : *now;
  }
  const int busy = running ? std::max(0, *running - 1 - (v.ranks_on_node - 1)) : 0;
  return choose_omp_wait_policy(v.ranks_on_node, threads_per_rank(usable, v.online, v.ranks_on_node, v.forced), cores,
                                busy);
}

ThreadPlacement place_threads_for_node() {
  const NodeView v = view_node();
  const std::vector<int>& cpus = v.cpus;
  ThreadPlacement p;
  const int usable = static_cast<int>(cpus.size());
  p.cores = std::max(usable, v.online);
  p.local_rank = v.local_rank;
  p.ranks_on_node = v.ranks_on_node;
  p.oversubscribed = p.ranks_on_node > p.cores;
  const int threads = threads_per_rank(usable, v.online, p.ranks_on_node, v.forced);
  if (p.oversubscribed) {
    p.binding = fmt::format("not pinned ({}, {})", count_of(p.ranks_on_node, "rank"), count_of(p.cores, "core"));
  } else if (usable < p.cores) {
    p.binding = fmt::format("bound by the launcher to {}", count_of(usable, "core"));
  } else {
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
      p.binding = fmt::format("not pinned ({} x {} on {})", count_of(p.ranks_on_node, "rank"),
                              count_of(threads, "thread"), count_of(usable, "core"));
    }
  }
  ops::configure_cpu_threads(threads);
  p.threads = threads;
  return p;
}

int configure_threads_for_node() { return place_threads_for_node().threads; }

}  // namespace cleave::train
