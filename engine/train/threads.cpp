// See threads.hpp.
#include "engine/train/threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
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

std::optional<TaskStat> task_stat_from_text(std::string_view text) {
  const std::size_t open = text.find(" (");
  const std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  const auto number = [](std::string_view digits) -> std::optional<int> {
    if (digits.empty()) return std::nullopt;
    int value = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + (c - '0');
    }
    return value;
  };
  const auto pid = number(text.substr(0, open));
  // After the comm: " S 1234 ..." (state, then the parent's pid).
  const std::string_view rest = text.substr(close + 1);
  if (!pid || rest.size() < 4 || rest[0] != ' ' || rest[2] != ' ') return std::nullopt;
  const std::string_view after_state = rest.substr(3);
  const auto ppid = number(after_state.substr(0, after_state.find(' ')));
  if (!ppid) return std::nullopt;
  return TaskStat{.pid = *pid, .state = rest[1], .ppid = *ppid};
}

int this_job_runnable(const ProcessLoad& self, const std::vector<ProcessLoad>& others, int ranks_on_node) {
  int runnable = std::max(0, self.runnable_threads);
  if (ranks_on_node <= 1) return runnable;
  for (const ProcessLoad& p : others) {
    if (p.pid != self.pid && p.ppid == self.ppid && !p.exe.empty() && p.exe == self.exe) {
      runnable += std::max(0, p.runnable_threads);
    }
  }
  return runnable;
}

int busy_elsewhere_from_samples(const std::vector<LoadSample>& samples) {
  if (samples.empty()) return 0;
  std::vector<int> busy;
  busy.reserve(samples.size());
  for (const LoadSample& s : samples) busy.push_back(std::max(0, s.procs_running - s.this_job_runnable));
  const auto median = busy.begin() + static_cast<std::ptrdiff_t>((busy.size() - 1) / 2);
  std::nth_element(busy.begin(), median, busy.end());
  return *median;
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool is_number(const char* name) { return name[0] >= '0' && name[0] <= '9'; }

// /proc/<pid>: its parent, its executable (read only when `want_exe`) and its runnable threads.
std::optional<ProcessLoad> process_load(const std::string& pid_dir, bool want_exe) {
  const auto process = task_stat_from_text(read_text(pid_dir + "/stat"));
  if (!process) return std::nullopt;
  ProcessLoad load;
  load.pid = process->pid;
  load.ppid = process->ppid;
  if (want_exe) {
    std::error_code ec;
    load.exe = std::filesystem::read_symlink(pid_dir + "/exe", ec).string();
  }
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(pid_dir + "/task", ec)) {
    const auto t = task_stat_from_text(read_text(task.path().string() + "/stat"));
    if (t && t->state == 'R') ++load.runnable_threads;
  }
  return load;
}

// This job's runnable threads now: this process's, and with other ranks on the node those of the processes
// with this one's parent (their executable is read only for those).
int this_job_runnable_now(int ranks_on_node) {
  const auto self = process_load("/proc/self", true);
  if (!self) return 0;
  std::vector<ProcessLoad> siblings;
  if (ranks_on_node > 1) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (!is_number(name.c_str()) || std::atoi(name.c_str()) == self->pid) continue;
      const auto stat = task_stat_from_text(read_text(entry.path().string() + "/stat"));
      if (!stat || stat->ppid != self->ppid) continue;
      if (auto load = process_load(entry.path().string(), true)) siblings.push_back(std::move(*load));
    }
  }
  return this_job_runnable(*self, siblings, ranks_on_node);
}

}  // namespace

WaitPolicyChoice omp_wait_policy_for_node() {
  const NodeView v = view_node();
  const int usable = static_cast<int>(v.cpus.size());
  const int cores = std::max(usable, v.online);
  std::vector<LoadSample> samples;
  for (int sample = 0; sample < kLoadSamples; ++sample) {
    if (sample > 0) usleep(kLoadSampleGapUs);
    const auto running = procs_running_from_stat(read_text("/proc/stat"));
    if (!running) continue;
    samples.push_back({.procs_running = *running, .this_job_runnable = this_job_runnable_now(v.ranks_on_node)});
  }
  return choose_omp_wait_policy(v.ranks_on_node, threads_per_rank(usable, v.online, v.ranks_on_node, v.forced), cores,
                                busy_elsewhere_from_samples(samples));
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
