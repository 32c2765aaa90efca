// Host fit: the ranks on one host against the memory it allows them (see host_fit.hpp).
#include "engine/run_plan/host_fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/allocator.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"

namespace cleave::run_plan {
namespace {

// a + b without passing INT64_MAX (a plan far past any machine must not wrap into one that fits).
std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  return a > std::numeric_limits<std::int64_t>::max() - b ? std::numeric_limits<std::int64_t>::max() : a + b;
}

}  // namespace

std::int64_t usable_host_bytes(std::int64_t limit_bytes) {
  return static_cast<std::int64_t>(std::floor(static_cast<double>(limit_bytes) * kHostMemoryShare));
}

std::int64_t least_host_bytes(const HostNeed& need, int ranks_on_host) {
  std::vector<std::int64_t> sorted = need.rank_bytes;
  std::sort(sorted.begin(), sorted.end());
  std::int64_t left = std::max(1, ranks_on_host), total = 0;
  for (const std::int64_t bytes : sorted) {
    for (int k = 0; k < need.ranks_per_pp_rank && left > 0; ++k, --left) total = saturating_add(total, bytes);
  }
  return total;
}

std::string host_fit_violation(const HostNeed& need, const HostMemory& host) {
  if (host.limit_bytes <= 0 || need.rank_bytes.empty()) return {};
  const std::int64_t usable = usable_host_bytes(host.limit_bytes);
  const std::int64_t world = static_cast<std::int64_t>(need.rank_bytes.size()) * std::max(1, need.ranks_per_pp_rank);
  const int ranks = static_cast<int>(std::min<std::int64_t>(std::max(1, host.ranks_on_host), world));
  const std::int64_t least = least_host_bytes(need, ranks);
  if (least <= usable) return {};
  const auto [low, high] = std::minmax_element(need.rank_bytes.begin(), need.rank_bytes.end());
  const auto largest = static_cast<int>(high - need.rank_bytes.begin());
  // Every rank alike (one pp rank, or pp ranks planned alike): the need is exact; else the least any placement holds.
  std::string per_rank;
  if (*low != *high) {
    per_rank = fmt::format("the least {} of the world {}: per-rank plans from {} to {}, pp rank {} the largest ({})",
                           count_of(ranks, "rank"), ranks == 1 ? "holds" : "hold", format_bytes(*low),
                           format_bytes(*high), largest, need.largest);
  } else if (ranks > 1) {
    per_rank = fmt::format("{} x about {} each ({})", count_of(ranks, "rank"), format_bytes(*high), need.largest);
  } else {
    per_rank = need.largest;
  }
  return fmt::format(
      "memory: the {} on this host {} {} of host memory ({}: {}), but this host allows {} of memory ({}) and a run "
      "may plan {:.0f}% of it, {} (the rest is left for the system, the MPI runtime and what the plan does not count): "
      "it would run out of memory, or be killed by the OOM killer, once the world is built; nothing was started. Put "
      "fewer ranks on this host (more hosts), split the model over more ranks "
      "(parallel.pipeline_model_parallel_size / tensor_model_parallel_size), use train.recompute, optimizer.zero_stage "
      "1, 2 or 3 with data parallelism, or lower batch.micro_batch_size; `cleave plan CONFIG --world N --memory-limit "
      "SIZE` with SIZE at most {} (this host's share per rank) searches layouts that fit",
      count_of(ranks, "rank"), ranks == 1 ? "needs" : "need", format_bytes(least), need.what, per_rank,
      format_bytes(host.limit_bytes), host.source, 100 * kHostMemoryShare, format_bytes(usable),
      format_bytes(usable / ranks));
}

HostNeed host_need(const Plan& plan, const config::RunConfig& config, const CpuKernels& cpu) {
  HostNeed need;
  const bool cuda = config.device.type == DeviceType::kCuda;
  need.what = cuda ? "the memory plan's page-locked host memory" : "the memory plan";
  const auto& p = config.parallel;
  CLEAVE_ASSERT(p.data_parallel_size > 0, "host_need needs a resolved config");
  need.ranks_per_pp_rank = std::max(1, p.tensor_model_parallel_size * p.context_parallel_size * p.data_parallel_size);
  std::int64_t largest = -1;
  for (int r = 0; r < plan.schedule.pp_size; ++r) {
    const MemoryPlan m = estimate_rank_memory(plan, config, r, cpu);
    const std::int64_t bytes = cuda ? m.host_pinned : m.total();
    need.rank_bytes.push_back(bytes);
    if (bytes > largest) largest = bytes, need.largest = m.breakdown();
  }
  return need;
}

}  // namespace cleave::run_plan
