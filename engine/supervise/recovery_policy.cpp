// The supervisor's decisions (recovery_policy.hpp).
#include "engine/supervise/recovery_policy.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/exit_code.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::supervise {
namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<int> ints_after(const std::string& list, const std::regex& each) {
  std::vector<int> out;
  for (auto it = std::sregex_iterator(list.begin(), list.end(), each); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stoi((*it)[1].str()));
  }
  return out;
}

// The failure an exit code of `cleave train` names on its own (engine/core/exit_code.hpp), if any.
std::optional<FailureKind> failure_of_exit_code(int exit_code) {
  if (exit_code == exit_status(ExitCode::kNoIntactCheckpoint)) return FailureKind::kNoIntactCheckpoint;
  if (exit_code == exit_status(ExitCode::kCheckpointMismatch)) return FailureKind::kCheckpointMismatch;
  if (exit_code == exit_status(ExitCode::kBadInput)) return FailureKind::kBadInput;
  return std::nullopt;
}

}  // namespace

std::vector<Slot> local_slots(int n) {
  std::vector<Slot> slots;
  for (int i = 0; i < n; ++i) slots.push_back({"localhost", i});
  return slots;
}

std::vector<Slot> slurm_slots(std::string_view ntasks) {
  int n = 0;
  const char* end = ntasks.data() + ntasks.size();
  const auto [ptr, ec] = std::from_chars(ntasks.data(), end, n);
  const bool digits = !ntasks.empty() && ntasks.find_first_not_of("0123456789") == std::string_view::npos;
  CLEAVE_CHECK_INPUT(digits && ec == std::errc() && ptr == end && n > 0,
                     "run: SLURM_NTASKS='{}' is not a positive task count; fix the allocation's task count (sbatch "
                     "--ntasks N) or give --slots N",
                     ntasks);
  return local_slots(n);
}

std::vector<Slot> parse_hostfile(std::string_view text, std::string_view path) {
  std::vector<Slot> slots;
  std::map<std::string, int> used;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string body = trim(line.substr(0, line.find('#')));
    if (body.empty()) continue;
    std::istringstream words(body);
    std::string host, word;
    words >> host;
    int count = 1;
    while (words >> word) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      CLEAVE_CHECK(eq != std::string::npos && (key == "slots" || key == "max_slots"),
                   "hostfile {} line {}: '{}' is not 'HOST [slots=N]' (unknown word '{}')", path, number, body, word);
      if (key != "slots") continue;
      const std::string value = word.substr(eq + 1);
      CLEAVE_CHECK(!value.empty() && value.find_first_not_of("0123456789") == std::string::npos && std::stoi(value) > 0,
                   "hostfile {} line {}: slots must be a whole number >= 1, got '{}'", path, number, value);
      count = std::stoi(value);
    }
    for (int i = 0; i < count; ++i) slots.push_back({host, used[host]++});
  }
  CLEAVE_CHECK(!slots.empty(), "hostfile {}: no slots (expected lines 'HOST slots=N')", path);
  return slots;
}

std::string hostfile_text(const std::vector<Slot>& slots) {
  std::vector<std::string> order;
  std::map<std::string, int> count;
  for (const Slot& s : slots) {
    if (count[s.host]++ == 0) order.push_back(s.host);
  }
  std::string out;
  for (const auto& host : order) out += fmt::format("{} slots={}\n", host, count[host]);
  return out;
}

std::string_view failure_kind_name(FailureKind kind) {
  switch (kind) {
    case FailureKind::kKilled: return "killed";
    case FailureKind::kHung: return "hung";
    case FailureKind::kError: return "error";
    case FailureKind::kUnknown: return "unknown";
    case FailureKind::kNoIntactCheckpoint: return "no intact checkpoint";
    case FailureKind::kCheckpointMismatch: return "checkpoint mismatch";
    case FailureKind::kBadInput: return "bad input";
  }
  return "unknown";
}

bool restart_can_cure(FailureKind kind) {
  return kind != FailureKind::kNoIntactCheckpoint && kind != FailureKind::kCheckpointMismatch &&
         kind != FailureKind::kBadInput;
}

int give_up_exit_status(FailureKind kind) {
  switch (kind) {
    case FailureKind::kBadInput: return exit_status(ExitCode::kBadInput);
    case FailureKind::kNoIntactCheckpoint: return exit_status(ExitCode::kNoIntactCheckpoint);
    case FailureKind::kCheckpointMismatch: return exit_status(ExitCode::kCheckpointMismatch);
    default: return exit_status(ExitCode::kError);
  }
}

Failure classify_failure(std::string_view output, int exit_code) {
  const std::string text(output);
  std::smatch m;
  // A failure the trainer's own exit code names (every checkpoint damaged, a run that does not fit its checkpoint, bad
  // input): the error line, whole.
  static const std::regex error(R"(\[rank ([0-9]+)/[0-9]+\] error: ([^\n]*))");
  static const std::regex plain_error(R"((?:^|\n)error: ([^\n]*))");
  if (const std::optional<FailureKind> kind = failure_of_exit_code(exit_code)) {
    if (std::regex_search(text, m, error)) return {*kind, {std::stoi(m[1].str())}, m[2].str()};
    if (std::regex_search(text, m, plain_error)) return {*kind, {}, m[1].str()};
    return {*kind, {},
            fmt::format("the job exited with code {}: {} (its log says more)", exit_code, failure_kind_name(*kind))};
  }
  // Open MPI refusing to start as root (a container's usual user) without --allow-run-as-root: no rank ran, and every
  // restart would be refused alike (it was "unknown": restarted, the machine profiled, the budget spent).
  static const std::regex as_root(R"((\S+) has detected an attempt to run as root)");
  if (std::regex_search(text, m, as_root)) {
    return {FailureKind::kBadInput, {},
            fmt::format("{} refuses to run as root, so no rank started: add --allow-run-as-root to --launcher (e.g. "
                        "--launcher \"mpiexec --allow-run-as-root\"), or export OMPI_ALLOW_RUN_AS_ROOT=1 "
                        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                        m[1].str())};
  }
  // The watchdog: "[rank 0/4] not answering within 1.5s: rank 1, rank 3 (stopped, dead, ...); aborting the job".
  static const std::regex hung(R"(not answering within [0-9.]+s: ((?:rank [0-9]+(?:, )?)+))");
  if (std::regex_search(text, m, hung)) {
    Failure f{FailureKind::kHung, ints_after(m[1].str(), std::regex(R"(rank ([0-9]+))")), ""};
    f.why = fmt::format("hang: the watchdog found {} not answering", trim(m[1].str()));
    return f;
  }
  // Open MPI: "mpirun noticed that process rank 1 with PID 123 on node n exited on signal 9 (Killed)."
  static const std::regex killed(R"(process rank ([0-9]+) with PID [0-9]+ on node \S+ exited on signal ([0-9]+)( \([^)]*\))?)");
  if (std::regex_search(text, m, killed)) {
    return {FailureKind::kKilled, {std::stoi(m[1].str())},
            fmt::format("rank {} exited on signal {}{}", m[1].str(), m[2].str(), m[3].str())};
  }
  // srun: "srun: error: node: task 1: Killed" (or "Terminated" after a peer's death: the Killed one first).
  static const std::regex srun_killed(R"(task ([0-9]+): (Killed|Segmentation fault|Aborted|Bus error))");
  if (std::regex_search(text, m, srun_killed)) {
    return {FailureKind::kKilled, {std::stoi(m[1].str())}, fmt::format("rank {}: {} (srun)", m[1].str(), m[2].str())};
  }
  // A rank's own error line: "[rank 1/4] error: ...".
  if (std::regex_search(text, m, error)) {
    std::string what = m[2].str();
    if (what.size() > 200) what = what.substr(0, 197) + "...";
    return {FailureKind::kError, {std::stoi(m[1].str())}, fmt::format("rank {} error: {}", m[1].str(), what)};
  }
  // Nothing known: the output's last line, which is often the launcher's own reason.
  std::string last;
  const std::size_t end = text.find_last_not_of(" \t\r\n-");  // past Open MPI's rules of dashes
  if (end != std::string::npos) {
    const std::size_t newline = text.rfind('\n', end);
    const std::size_t begin = newline == std::string::npos ? 0 : newline + 1;
    last = trim(text.substr(begin, end + 1 - begin));
    if (last.size() > 200) last = last.substr(0, 197) + "...";
  }
  return {FailureKind::kUnknown, {},
          fmt::format("the job exited with code {} and no line names a rank{}", exit_code,
                      last.empty() ? std::string() : fmt::format("; its last line: \"{}\"", last))};
}

std::vector<Slot> remaining_slots(const std::vector<Slot>& slots, const Failure& failure,
                                  const std::vector<bool>& healthy) {
  std::set<int> drop;
  if (failure.kind == FailureKind::kKilled || failure.kind == FailureKind::kHung) {
    drop.insert(failure.ranks.begin(), failure.ranks.end());
  }
  std::vector<Slot> left;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (drop.count(static_cast<int>(i)) > 0) continue;
    if (!healthy.empty() && !healthy[i]) continue;
    left.push_back(slots[i]);
  }
  return left;
}

RestartDecision decide_restart(int restarts_done, int max_restarts, int ranks_left, int min_ranks) {
  if (restarts_done >= max_restarts) {
    return {false, fmt::format("the restart budget is spent: {} restart{} made, --max-restarts {}", restarts_done,
                               restarts_done == 1 ? "" : "s", max_restarts)};
  }
  if (ranks_left < min_ranks) {
    return {false, fmt::format("{} rank{} left, fewer than --min-ranks {}", ranks_left, ranks_left == 1 ? "" : "s",
                               min_ranks)};
  }
  if (ranks_left < 1) return {false, "no rank left"};
  return {true, ""};
}

std::optional<planner::PlanChoice> keep_layout(const planner::PlanChoice& old, int world) {
  const int model_ranks = old.tp * old.cp * old.pp;
  if (world < model_ranks) return std::nullopt;
  const std::int64_t global = old.global_batch;
  CLEAVE_ASSERT(global > 0, "keep_layout: the old plan has no global batch");
  for (int dp = world / model_ranks; dp >= 1; --dp) {
    if (global % dp != 0 || (dp * old.cp) % old.ep != 0) continue;
    const std::int64_t per_replica = global / dp;
    std::int64_t micro = std::min(old.micro_batch, per_replica);
    while (per_replica % micro != 0) --micro;
    // Pipeline schedules need at least pp micro-batches per replica in some generators; the config's own check
    // refuses what does not work, so keep the largest micro-batch that divides.
    planner::PlanChoice next = old;
    next.dp = dp;
    next.micro_batch = micro;
    if (dp * old.cp == 1) {
      next.zero_stage = 0;
      next.zero_reduce = config::ZeroReduce::kAuto;
    }
    return next;
  }
  return std::nullopt;
}

std::optional<int> smallest_world(int from, int to, const std::function<bool(int)>& fits) {
  for (int w = std::max(1, from); w <= to; ++w) {
    if (fits(w)) return w;
  }
  return std::nullopt;
}

std::int64_t checkpoint_interval_for(double max_lost_s, double step_s) {
  CLEAVE_ASSERT(step_s > 0, "checkpoint_interval_for: step time must be > 0");
  const double steps = std::floor(max_lost_s / step_s);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::min(steps, 1e9)));
}

}  // namespace cleave::supervise
