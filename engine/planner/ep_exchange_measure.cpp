// See ep_exchange_measure.hpp.
#include "engine/planner/ep_exchange_measure.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/planner/median.hpp"
#include "engine/planner/profile_measure.hpp"
#include "engine/planner/stopwatch.hpp"

namespace cleave::planner {
namespace {

// One size's buffers and counts: `rows` split evenly over the ranks (the remainder to the last), received alike.
class TimedRowExchange {
 public:
  TimedRowExchange(comm::Communicator& comm, const EpExchangeSize& size)
      : comm_(comm),
        send_(Tensor::zeros(Shape{size.rows, size.width}, dtype(size), MemoryCategory::kWorkspace, cpu_allocator())),
        recv_(Tensor::zeros(Shape{size.rows, size.width}, dtype(size), MemoryCategory::kWorkspace, cpu_allocator())),
        rows_(static_cast<std::size_t>(comm.size()), size.rows / comm.size()) {
    rows_.back() += size.rows % comm.size();
  }
  // The rows to send just written, as the trainer's gather writes them before its dispatch (in cache; the receive
  // buffer and the transport's own buffers as the caller left them).
  void touch_send() {
    auto* p = static_cast<unsigned char*>(send_.raw_data());
    const std::size_t n = send_.nbytes();
    for (std::size_t i = 0; i < n; i += 64) p[i] = static_cast<unsigned char>(i);
  }
  double run() {
    const auto start = ProfileClock::now();
    comm_.all_to_all_v(send_, rows_, recv_, rows_)->wait();
    return seconds_since(start);
  }

 private:
  static DType dtype(const EpExchangeSize& size) { return size.bytes_per_value == 2 ? DType::kBF16 : DType::kF32; }
  comm::Communicator& comm_;
  Tensor send_, recv_;
  std::vector<std::int64_t> rows_;
};

}  // namespace

std::vector<EpExchangeSize> ep_exchange_sizes(const partition::ModelSpec& spec,
                                              const std::vector<std::int64_t>& micro_batches,
                                              std::int64_t bytes_per_value) {
  const std::int64_t micro = micro_batches.empty() ? 1 : *std::max_element(micro_batches.begin(), micro_batches.end());
  EpExchangeSize most;
  for (const auto& b : spec.blocks) {
    if (b.n_experts <= 0) continue;
    const EpExchangeSize x{micro * b.seq_len * b.top_k, b.in_features, bytes_per_value};
    if (x.bytes() > most.bytes()) most = x;
  }
  if (most.rows == 0) return {};
  return {{std::max<std::int64_t>(1, most.rows / 2), most.width, bytes_per_value}, most,
          {2 * most.rows, most.width, bytes_per_value}};
}

std::vector<partition::AlphaBeta> measure_ep_exchange(comm::Communicator& world,
                                                     const std::vector<EpExchangeSize>& sizes, int rounds, bool cold,
                                                     int repeats) {
  std::vector<partition::AlphaBeta> fits;
  if (world.size() < 2 || sizes.size() < 2) return fits;
  CacheEvictor evictor(last_level_cache().bytes);  // the whole cache: the transport's buffers are the node's
  for (const int g : profile_group_sizes(world.size())) {  // as measure_collectives
    auto group = world.split(world.rank() / g, world.rank(), fmt::format("ep_exchange{}", g));
    std::vector<TimedRowExchange> exchanges;
    for (const auto& s : sizes) exchanges.emplace_back(*group, s);
    std::vector<std::vector<double>> times(sizes.size());
    for (int round = 0; round < std::max(1, rounds); ++round) {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        world.barrier()->wait();
        exchanges[i].run();  // warm-up: the buffers' first touch
        for (int rep = 0; rep < repeats; ++rep) {
          if (cold) evictor.evict();
          exchanges[i].touch_send();
          world.barrier()->wait();  // every rank arrives together: the exchange's own time, no wait for a peer
          times[i].push_back(exchanges[i].run());
        }
      }
    }
    std::vector<double> medians;
    for (auto& t : times) medians.push_back(median(t));
    mean_over_ranks(medians, &world);
    std::vector<std::pair<double, double>> points;
    for (std::size_t i = 0; i < sizes.size(); ++i) points.push_back({sizes[i].bytes(), medians[i]});
    fits.push_back(partition::fit_alpha_beta(points, g));
  }
  return fits;
}

}  // namespace cleave::planner
