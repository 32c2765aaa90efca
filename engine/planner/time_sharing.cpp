// See time_sharing.hpp.
#include "engine/planner/time_sharing.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "engine/planner/median.hpp"
#include "engine/planner/probe_gemm.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::planner {
namespace {

using Clock = ProfileClock;

constexpr int kStreamGemms = 384;  // 128³ each: about 30 ms on one Zen 4 core
constexpr int kRounds = 5;
constexpr double kSpinBudgetS = 0.5;


enum class Poll { kYield, kSpin };

// Waits for `work` as the trainer's waits poll when ranks outnumber cores (yielding), or spinning.
void wait_polling(const comm::WorkPtr& work, Poll poll) {
  while (!work->test()) {
    if (poll == Poll::kYield) std::this_thread::yield();
  }
}

// Sums one value per rank over the ranks (a float all-reduce; the pinned ranks poll it yielding).
std::vector<float> sum_over_ranks(comm::Communicator& comm, std::vector<float> values) {
  Tensor t = Tensor::from_floats(values, Shape{static_cast<std::int64_t>(values.size())}, MemoryCategory::kWorkspace);
  wait_polling(comm.all_reduce(t, comm::ReduceOp::kSum), Poll::kYield);
  const float* s = t.data<float>();
  return {s, s + values.size()};
}

#if defined(__linux__)
// The calling thread's affinity, and pinning it to one core; false where the kernel refuses.
class Pin {
 public:
  Pin() { ok_ = sched_getaffinity(0, sizeof(saved_), &saved_) == 0; }
  int first_core() const {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) return cpu;
    }
    return -1;
  }
  bool to(int core) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(core, &one);
    return ok_ && core >= 0 && sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  void restore() {
    if (ok_) sched_setaffinity(0, sizeof(saved_), &saved_);
  }

 private:
  cpu_set_t saved_{};
  bool ok_ = false;
};
#endif

// One ping-pong between ranks 0 and 1: rank 0 sends a count and waits for it back; half the trip on rank 0.
class PingPong {
 public:
  explicit PingPong(comm::Communicator& comm)
      : comm_(comm), buf_(Tensor::zeros(Shape{1}, DType::kI64, MemoryCategory::kWorkspace, cpu_allocator())) {}
  double handoff(Poll poll) {
    const auto start = Clock::now();
    const int rank = comm_.rank();
    const int peer = 1 - rank;
    if (rank == 0) wait_polling(comm_.batch_p2p({comm::P2POp::send(buf_, peer)}), poll);
    wait_polling(comm_.batch_p2p({comm::P2POp::recv(buf_, peer)}), poll);
    if (rank == 1) wait_polling(comm_.batch_p2p({comm::P2POp::send(buf_, peer)}), poll);
    return seconds_since(start) / 2;
  }

 private:
  comm::Communicator& comm_;
  Tensor buf_;
};

}  // namespace

std::optional<TimeSharingMeasure> measure_time_sharing(comm::Communicator& comm, int trips) {
  CLEAVE_CHECK(comm.size() >= 2 && trips >= 10, "profile: time sharing needs 2 or more ranks and trips >= 10, got {} and {}",
               comm.size(), trips);
#if defined(__linux__)
  const bool pair = comm.rank() < 2;
  Pin pin;
  // Rank 0's first core, for both; then whether both can be pinned there (tried once, undone at once).
  const std::vector<float> shared = sum_over_ranks(comm, {comm.rank() == 0 ? static_cast<float>(pin.first_core()) : 0.f});
  const int core = static_cast<int>(shared[0]);
  const bool pinned = !pair || pin.to(core);
  pin.restore();
  if (sum_over_ranks(comm, {pinned ? 1.f : 0.f})[0] < static_cast<float>(comm.size())) return std::nullopt;

  ProbeGemm probe;
  const auto stream = [&] { return probe.run(kStreamGemms); };
  PingPong ping(comm);
  std::vector<double> ratios, yielded, spun;
  double spin_spent = 0;
  for (int round = 0; round < kRounds; ++round) {
    wait_polling(comm.barrier(), Poll::kYield);
    const double own = pair ? stream() : 0.0;
    if (pair) pin.to(core);
    wait_polling(comm.barrier(), Poll::kYield);
    const double on_shared = pair ? stream() : 0.0;
    if (own > 0) ratios.push_back(on_shared / own);
    wait_polling(comm.barrier(), Poll::kYield);
    for (int i = 0; pair && i < trips / kRounds; ++i) yielded.push_back(ping.handoff(Poll::kYield));
    // Spinning, each handoff can cost a time slice: a few trips a round, within the budget (rank 0 decides).
    const bool spin = sum_over_ranks(comm, {comm.rank() == 0 && spin_spent < kSpinBudgetS ? 1.f : 0.f})[0] > 0;
    for (int i = 0; spin && pair && i < std::max(1, trips / 10 / kRounds); ++i) {
      const auto start = Clock::now();
      spun.push_back(ping.handoff(Poll::kSpin));
      spin_spent += seconds_since(start);
    }
    if (pair) pin.restore();
  }
  wait_polling(comm.barrier(), Poll::kYield);
  // Rank 0 and 1's medians, averaged (the stream) or rank 0's (it timed the trips).
  const double r = median(ratios), y = median(yielded), s = median(spun);
  const std::vector<float> sums = sum_over_ranks(
      comm, {static_cast<float>(r), comm.rank() == 0 ? static_cast<float>(y) : 0.f, comm.rank() == 0 ? static_cast<float>(s) : 0.f});
  TimeSharingMeasure m;
  m.compute_ratio = std::max(0.0, static_cast<double>(sums[0]) / 2);
  m.handoff_s = std::max(0.0, static_cast<double>(sums[1]));
  m.handoff_spin_s = std::max(0.0, static_cast<double>(sums[2]));
  return m;
#else
  (void)comm, (void)trips;
  return std::nullopt;
#endif
}

}  // namespace cleave::planner
