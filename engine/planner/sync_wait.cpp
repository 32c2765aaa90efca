// See sync_wait.hpp.
#include "engine/planner/sync_wait.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/planner/probe_gemm.hpp"

namespace cleave::planner {
namespace {

using Clock = ProfileClock;

// A long stream of compute without a meeting: kStreamChunks chunks of the longest size back to back (about 50 ms on
// one core), once every kStreamEvery rounds of the meeting loop.
constexpr int kStreamChunks = 48;
constexpr int kStreamEvery = 30;


// One count exchange with every peer, timed from the call to its completion.
class TimedCountExchange {
 public:
  explicit TimedCountExchange(comm::Communicator& comm)
      : comm_(comm),
        send_(Tensor::zeros(Shape{comm.size(), 1}, DType::kI64, MemoryCategory::kWorkspace, cpu_allocator())),
        recv_(Tensor::zeros(Shape{comm.size(), 1}, DType::kI64, MemoryCategory::kWorkspace, cpu_allocator())) {}
  double run() {
    const auto start = Clock::now();
    comm::exchange_counts(comm_, send_, recv_)->wait();
    return seconds_since(start);
  }

 private:
  comm::Communicator& comm_;
  Tensor send_, recv_;
};

}  // namespace

MeetingWaitFit fit_meeting_wait(const std::vector<MeetingPoint>& points) {
  CLEAVE_ASSERT(points.size() >= 2, "fit_meeting_wait needs two or more points, got {}", points.size());
  const double n = static_cast<double>(points.size());
  double sc = 0, sw = 0, scc = 0, scw = 0;
  for (const auto& p : points) {
    sc += p.compute_s, sw += p.wait_s, scc += p.compute_s * p.compute_s, scw += p.compute_s * p.wait_s;
  }
  const double spread = n * scc - sc * sc;
  CLEAVE_ASSERT(spread > 0, "fit_meeting_wait needs two or more distinct computes");
  MeetingWaitFit f;
  f.per_compute = (n * scw - sc * sw) / spread;
  f.per_meeting_s = (sw - f.per_compute * sc) / n;
  if (f.per_compute < 0) return {std::max(0.0, sw / n), 0.0};
  if (f.per_meeting_s < 0) return {0.0, std::max(0.0, scw / scc)};
  return f;
}

SyncWaitMeasure measure_sync_wait(comm::Communicator& comm, int syncs) {
  CLEAVE_CHECK(comm.size() >= 2 && syncs >= 1, "profile: the sync wait needs 2 or more ranks and syncs >= 1, got {} and {}",
               comm.size(), syncs);
  ProbeGemm probe;
  TimedCountExchange exchange(comm);
  // The exchange's own cost: back to back, the ranks meeting at every call.
  std::vector<double> alone;
  comm.barrier()->wait();
  for (int i = 0; i <= syncs; ++i) {
    const double t = exchange.run();
    if (i > 0) alone.push_back(t);
  }
  // Its fast mode, the 10th percentile: on this kind of machine the back-to-back exchange is bimodal (a few us while
  // both ranks spin, some tens of us once a rank's progress has to be woken), and a median that lands on the slow
  // mode one profile and the fast one the next moved the waits measured against it twenty-fold between profiles.
  const std::size_t fast = alone.size() / 10;
  std::nth_element(alone.begin(), alone.begin() + static_cast<std::ptrdiff_t>(fast), alone.end());
  const double exchange_s = alone[fast];
  // Compute, then meet; the chunk sizes interleaved so a burst of load lands on all of them.
  constexpr std::array<int, 3> kChunks = {1, 4, 16};
  std::array<std::vector<double>, kChunks.size()> chunk_s;
  std::array<double, kChunks.size()> waited{};
  double streamed = 0;  // the long streams' time, no meeting inside
  int streams = 0;
  comm.barrier()->wait();
  for (int i = 0; i < syncs; ++i) {
    for (std::size_t k = 0; k < kChunks.size(); ++k) {
      chunk_s[k].push_back(probe.run(kChunks[k]));
      waited[k] += std::max(0.0, exchange.run() - exchange_s);
    }
    if (i % kStreamEvery == kStreamEvery - 1) {  // a stream among the meetings, so the same load lands on both
      streamed += probe.run(kStreamChunks * kChunks.back());
      ++streams;
      exchange.run();
    }
  }
  // Per chunk size its mean compute and mean wait, then the compute at the medians and the exchange, summed over
  // the ranks.
  const double per_size = static_cast<double>(syncs);
  std::vector<float> sums;
  double computed = 0, at_median = 0;
  for (std::size_t k = 0; k < kChunks.size(); ++k) {
    auto& times = chunk_s[k];
    double total = 0;
    for (double t : times) total += t;
    computed += total;
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    at_median += static_cast<double>(times.size()) * times[times.size() / 2];
    sums.push_back(static_cast<float>(total / per_size));
    sums.push_back(static_cast<float>(waited[k] / per_size));
  }
  sums.push_back(static_cast<float>(computed));
  sums.push_back(static_cast<float>(at_median));
  sums.push_back(static_cast<float>(exchange_s));
  // The streams against the same GEMMs at the median of the longest chunk (the table's kind of figure).
  const auto& longest = chunk_s.back();  // already partitioned at its median above
  sums.push_back(static_cast<float>(streamed));
  sums.push_back(static_cast<float>(streams * kStreamChunks * longest[longest.size() / 2]));
  Tensor t = Tensor::from_floats(sums, Shape{static_cast<std::int64_t>(sums.size())}, MemoryCategory::kWorkspace);
  comm.all_reduce(t, comm::ReduceOp::kSum)->wait();
  const float* s = t.data<float>();
  const double ranks = static_cast<double>(comm.size());
  std::vector<MeetingPoint> points;
  for (std::size_t k = 0; k < kChunks.size(); ++k) {
    points.push_back({static_cast<double>(s[2 * k]) / ranks, static_cast<double>(s[2 * k + 1]) / ranks});
  }
  const std::size_t rest = 2 * kChunks.size();
  SyncWaitMeasure m;
  const MeetingWaitFit fit = fit_meeting_wait(points);
  m.wait_per_compute = fit.per_compute;
  m.wait_per_meeting = fit.per_meeting_s;
  if (s[rest + 1] > 0) {
    m.compute_stretch = std::max(0.0, static_cast<double>(s[rest]) / static_cast<double>(s[rest + 1]) - 1.0);
  }
  m.exchange_s = static_cast<double>(s[rest + 2]) / ranks;
  if (s[rest + 4] > 0) {
    m.stream_stretch = std::max(0.0, static_cast<double>(s[rest + 3]) / static_cast<double>(s[rest + 4]) - 1.0);
  }
  return m;
}

}  // namespace cleave::planner
