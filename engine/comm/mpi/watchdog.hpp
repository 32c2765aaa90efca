// Watchdog pieces shared by the MPI and NCCL backends: the polling loop of Work::wait, the liveness probe
// and the timeout report that ends the job.
//
// When a Work is still incomplete after CommOptions::timeout_s, the rank prints
//   [rank r/N] comm timeout after Xs in <op> (group '<name>' = world ranks [...]; <details>)
// then spends a short grace period pinging the group's members over the probe's private communicator. Every
// rank answers pings from inside its own wait loops, so a member that does not answer is stopped, dead, or
// busy outside any communication call; the rank prints which members did not answer and calls
// MPI_Abort(MPI_COMM_WORLD), which makes the launcher kill every rank (a SIGSTOPped one included).
//
// Invariant: nothing here blocks without a bound; the probe uses only non-blocking MPI calls.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace cleave::comm {

// Spin while an op is young, then sleep with a growing interval. While spinning, a rank yields its core
// between polls only when ranks are oversubscribed (more local ranks than cores, Open MPI's
// mpi_yield_when_idle or mpi_oversubscribe, or CLEAVE_COMM_YIELD=1): yielding lets oversubscribed ranks
// progress, but on a rank with a core of its own it only delays the next poll (measured: 2 ranks, 2 MiB
// all_reduce, 10x slower with yield on a loaded machine). CLEAVE_COMM_YIELD=0 forces pure spinning.
bool yield_when_polling();

// The spin window starts when the wait starts and again whenever the waiter reports progress(): a wait whose
// transfer is still moving (pieces completing) never sleeps, since with Open MPI's copy-in/copy-out shared
// memory a large message moves only while its ranks poll (measured, comm_bench, 2 ranks: a 64 MiB f32
// all_reduce took 412 ms when the wait slept after its first 10 ms, 27 ms when it kept polling).
class PollBackoff {
 public:
  PollBackoff() : start_(std::chrono::steady_clock::now()), active_(start_) {}
  void pause();
  // Something the wait is waiting for completed: spin again, as at the start.
  void progress();
  double elapsed_s() const;  // since the wait started (for timeouts)
  // True about once a millisecond: when to do the slower checks (liveness answers, device errors).
  bool slow_tick();

 private:
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point active_;  // the start or the last progress()
  std::chrono::steady_clock::time_point last_tick_{};
  std::chrono::microseconds sleep_{50};
};

// Owns a duplicate of the root communicator used only for liveness pings. Shared (shared_ptr) by every
// communicator split from that root, so all wait loops of a process answer on one channel.
class LivenessProbe {
 public:
  explicit LivenessProbe(MPI_Comm root);  // collective over root (MPI_Comm_dup)
  ~LivenessProbe();
  LivenessProbe(const LivenessProbe&) = delete;
  LivenessProbe& operator=(const LivenessProbe&) = delete;

  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  // World rank of each probe rank (for messages).
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // Answers pending pings. Cheap; called from every wait loop.
  void serve();
  // Pings `members` (probe ranks) and returns those that neither answer nor ping us within grace_s.
  std::vector<int> unresponsive(const std::vector<int>& members, double grace_s);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::vector<int> world_ranks_;
  std::vector<char> heard_from_;  // during unresponsive(): who pinged us
  const int token_ = 1;           // payload of pings and answers (must outlive the freed send requests)
};

// What a timed-out Work reports.
struct TimeoutContext {
  std::string op;                   // "all_reduce"
  std::string comm_name;            // "world/dp"
  std::vector<int> world_ranks;     // members, by rank in the communicator
  std::vector<int> probe_ranks;     // members, by rank in the probe communicator
  std::string details;              // "1024 f32; pending: recv from rank 3 tag 0"
  double timeout_s = 0;
};

// Prints the report, probes the members, runs `before_abort` (e.g. ncclCommAbort) and calls MPI_Abort.
[[noreturn]] void watchdog_expire(LivenessProbe& probe, const TimeoutContext& context, double elapsed_s,
                                  const std::function<void()>& before_abort = {});

// The exit code of a job ended by the watchdog.
inline constexpr int kWatchdogExitCode = 3;

}  // namespace cleave::comm
