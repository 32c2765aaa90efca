// Watchdog: polling backoff, liveness probe, timeout report (watchdog.hpp).
#include "engine/comm/mpi/watchdog.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "engine/comm/communicator.hpp"
#include "engine/comm/launch_env.hpp"
#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/mpi/wait_notice.hpp"

namespace cleave::comm {
namespace {

constexpr int kPingTag = 1;
constexpr int kAnswerTag = 2;
// Spin this long after the wait starts or last made progress before sleeping: covers small and medium messages,
// and each piece of a large one, without a sleep on the critical path.
constexpr auto kSpinWindow = std::chrono::milliseconds(10);
// Longest sleep between polls. Open MPI's shared-memory transport moves a large message only while a rank
// polls, so a long sleep throttles big buckets (measured: a 3.3 MB bucket took 80-190 ms with 2 ms sleeps
// on a loaded machine, 1-5 ms when polled continuously); 200 us keeps that cost small and still yields.
constexpr auto kMaxSleep = std::chrono::microseconds(200);

std::string world_prefix() {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return fmt::format("[rank {}/{}] ", rank, size);
}

// One write per line, so lines of ranks that share the launcher's stderr do not interleave.
void print_line(std::string line) {
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

bool yield_when_polling() {
  static const bool yield = [] {
    auto flag = [](const char* name) -> std::optional<bool> {
      const char* v = std::getenv(name);
      if (v == nullptr) return std::nullopt;
      return std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0;
    };
    if (auto forced = flag("CLEAVE_COMM_YIELD")) return *forced;
    if (flag("OMPI_MCA_mpi_yield_when_idle").value_or(false) || flag("OMPI_MCA_mpi_oversubscribe").value_or(false)) {
      return true;
    }
    const std::optional<LocalRank> local = local_rank_from_env(process_env());
    const unsigned cores = std::thread::hardware_concurrency();
    return local && cores > 0 && local->local_size > static_cast<int>(cores);
  }();
  return yield;
}

void PollBackoff::pause() {
  const auto now = std::chrono::steady_clock::now();
  if (now - active_ < kSpinWindow) {
    if (yield_when_polling()) std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(sleep_);
  sleep_ = std::min(sleep_ * 2, kMaxSleep);
}

void PollBackoff::progress() {
  active_ = std::chrono::steady_clock::now();
  sleep_ = std::chrono::microseconds(50);
}

double PollBackoff::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool PollBackoff::slow_tick() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_tick_ < std::chrono::milliseconds(1)) return false;
  last_tick_ = now;
  return true;
}

LivenessProbe::LivenessProbe(MPI_Comm root) {
  CLEAVE_MPI_CHECK(MPI_Comm_dup(root, &comm_));
  CLEAVE_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  int size = 0;
  CLEAVE_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  CLEAVE_MPI_CHECK(MPI_Comm_size(comm_, &size));
  world_ranks_.resize(static_cast<std::size_t>(size));
  std::vector<int> mine(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) mine[static_cast<std::size_t>(i)] = i;
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Group world = MPI_GROUP_NULL;
  CLEAVE_MPI_CHECK(MPI_Comm_group(comm_, &group));
  CLEAVE_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  CLEAVE_MPI_CHECK(MPI_Group_translate_ranks(group, size, mine.data(), world, world_ranks_.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  heard_from_.assign(static_cast<std::size_t>(size), 0);
}

LivenessProbe::~LivenessProbe() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void LivenessProbe::serve() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, comm_, &flag, &status) != MPI_SUCCESS || !flag) return;
    int payload = 0;
    if (MPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kPingTag, comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
    heard_from_[static_cast<std::size_t>(status.MPI_SOURCE)] = 1;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&token_, 1, MPI_INT, status.MPI_SOURCE, kAnswerTag, comm_, &request) == MPI_SUCCESS) {
      MPI_Request_free(&request);
    }
  }
}

std::vector<int> LivenessProbe::unresponsive(const std::vector<int>& members, double grace_s) {
  std::fill(heard_from_.begin(), heard_from_.end(), 0);
  heard_from_[static_cast<std::size_t>(rank_)] = 1;
  for (int member : members) {
    if (member == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&token_, 1, MPI_INT, member, kPingTag, comm_, &request) == MPI_SUCCESS) {
      MPI_Request_free(&request);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  auto all_heard = [&] {
    return std::all_of(members.begin(), members.end(),
                       [&](int m) { return heard_from_[static_cast<std::size_t>(m)] != 0; });
  };
  while (!all_heard() && std::chrono::steady_clock::now() < deadline) {
    serve();
    for (;;) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm_, &flag, &status) != MPI_SUCCESS || !flag) break;
      int payload = 0;
      if (MPI_Recv(&payload, 1, MPI_INT, status.MPI_SOURCE, kAnswerTag, comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        break;
      }
      heard_from_[static_cast<std::size_t>(status.MPI_SOURCE)] = 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<int> silent;
  for (int m : members) {
    if (!heard_from_[static_cast<std::size_t>(m)]) silent.push_back(m);
  }
  return silent;
}

void watchdog_expire(LivenessProbe& probe, const TimeoutContext& context, double elapsed_s,
                     const std::function<void()>& before_abort) {
  const std::string prefix = world_prefix();
  print_line(fmt::format("{}comm timeout after {:.1f}s in {} (group '{}' = world ranks {}{}{})", prefix, elapsed_s,
                         context.op, context.comm_name, format_ranks(context.world_ranks),
                         context.details.empty() ? "" : "; ", context.details));
  // Long enough for peers whose own timers fire a little later to answer, short next to the timeout.
  const double grace_s = std::clamp(context.timeout_s / 2, 0.5, 5.0);
  std::vector<int> silent = probe.unresponsive(context.probe_ranks, grace_s);
  std::vector<int> silent_world;
  for (int s : silent) silent_world.push_back(probe.world_ranks()[static_cast<std::size_t>(s)]);
  if (silent_world.empty()) {
    print_line(fmt::format("{}every member of '{}' answered a liveness ping within {:.1f}s (a peer may be waiting "
                           "on a different operation: mismatched collectives?); aborting the job",
                           prefix, context.comm_name, grace_s));
  } else {
    std::string list;
    for (int s : silent_world) list += fmt::format("{}rank {}", list.empty() ? "" : ", ", s);
    print_line(fmt::format("{}not answering within {:.1f}s: {} (stopped, dead, or busy outside communication); "
                           "aborting the job",
                           prefix, grace_s, list));
  }
  if (before_abort) before_abort();
  withdraw_wait_notice();
  MPI_Abort(MPI_COMM_WORLD, kWatchdogExitCode);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest if an implementation does
}

}  // namespace cleave::comm
