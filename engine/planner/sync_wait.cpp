// See sync_wait.hpp.
#include "engine/planner/sync_wait.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::planner {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One count exchange with every peer, timed from the call to its completion.
class CountExchange {
 public:
  explicit CountExchange(comm::Communicator& comm)
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

SyncWaitMeasure measure_sync_wait(comm::Communicator& comm, int syncs) {
  CLEAVE_CHECK(comm.size() >= 2 && syncs >= 1, "profile: the sync wait needs 2 or more ranks and syncs >= 1, got {} and {}",
               comm.size(), syncs);
  const auto resources = ops::make_device_resources(Device::cpu());  // a run's CPU state: GEMM primitives kept
  const ops::Context ctx{.resources = resources.get()};
  constexpr std::int64_t kN = 128;
  const std::vector<float> values(static_cast<std::size_t>(kN * kN), 0.5f);
  const Tensor a = Tensor::from_floats(values, Shape{kN, kN}, MemoryCategory::kWorkspace);
  const Tensor b = Tensor::from_floats(values, Shape{kN, kN}, MemoryCategory::kWorkspace);
  Tensor c = Tensor::zeros(Shape{kN, kN}, DType::kF32, MemoryCategory::kWorkspace, cpu_allocator());
  CountExchange exchange(comm);
  // The exchange's own cost: back to back, the ranks meeting at every call.
  std::vector<double> alone;
  comm.barrier()->wait();
  for (int i = 0; i <= syncs; ++i) {
    const double t = exchange.run();
    if (i > 0) alone.push_back(t);
  }
  std::nth_element(alone.begin(), alone.begin() + alone.size() / 2, alone.end());
  const double exchange_s = alone[alone.size() / 2];
  // Compute, then meet; the chunk sizes interleaved so a burst of load lands on all of them.
  constexpr std::array<int, 3> kChunks = {1, 4, 16};
  std::array<std::vector<double>, kChunks.size()> chunk_s;
  double waited = 0;
  comm.barrier()->wait();
  for (int i = 0; i < syncs; ++i) {
    for (std::size_t k = 0; k < kChunks.size(); ++k) {
      const auto start = Clock::now();
      for (int g = 0; g < kChunks[k]; ++g) ops::gemm(ctx, a, b, c);
      chunk_s[k].push_back(seconds_since(start));
      waited += std::max(0.0, exchange.run() - exchange_s);
    }
  }
  double computed = 0, at_median = 0;
  for (auto& times : chunk_s) {
    for (double t : times) computed += t;
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    at_median += static_cast<double>(times.size()) * times[times.size() / 2];
  }
  std::array<float, 3> sums = {static_cast<float>(waited), static_cast<float>(computed), static_cast<float>(at_median)};
  Tensor t = Tensor::from_floats(sums, Shape{3}, MemoryCategory::kWorkspace);
  comm.all_reduce(t, comm::ReduceOp::kSum)->wait();
  const float* s = t.data<float>();
  SyncWaitMeasure m;
  if (s[1] > 0) m.wait_per_compute = static_cast<double>(s[0]) / static_cast<double>(s[1]);
  if (s[2] > 0) m.compute_stretch = std::max(0.0, static_cast<double>(s[1]) / static_cast<double>(s[2]) - 1.0);
  return m;
}

}  // namespace cleave::planner
