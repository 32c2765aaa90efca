// Stage partitioner: contiguous block ranges per stage (see stage_partitioner.hpp for the methods).
//
// The balanced methods share one min-max dynamic program: best[k][j] is the smallest possible largest
// segment cost when the first j blocks form k stages; a segment that breaks the memory cap is never
// taken. Ties keep the earliest split, so results are deterministic.
#include "partition/stage_partitioner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>

#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"

namespace cleave::partition {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();


// Segment cost of blocks [i, j) placed as stage k; +inf marks a segment that may not be used.
using SegmentCost = std::function<double(int k, int i, int j)>;

// Min-max split of n blocks into s non-empty contiguous stages. Returns stage sizes, or nothing when
// every split uses a forbidden segment.
std::optional<std::vector<int>> min_max_split(int n, int s, const SegmentCost& cost) {
  std::vector<std::vector<double>> best(s + 1, std::vector<double>(n + 1, kInfinity));
  std::vector<std::vector<int>> choice(s + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0.0;
  for (int k = 1; k <= s; ++k) {
    // k stages cover at least k blocks and leave at least one block for each of the s - k others.
    for (int j = k; j <= n - (s - k); ++j) {
      for (int i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == kInfinity) continue;
        const double segment = cost(k - 1, i, j);
        if (segment == kInfinity) continue;
        const double candidate = std::max(best[k - 1][i], segment);
        if (candidate < best[k][j]) {
          best[k][j] = candidate;
          choice[k][j] = i;
        }
      }
    }
  }
  if (best[s][n] == kInfinity) return std::nullopt;
  std::vector<int> sizes(s);
  for (int k = s, j = n; k >= 1; --k) {
    const int i = choice[k][j];
    CLEAVE_ASSERT(i >= 0, "min-max split lost its back-pointer at stage {}", k);
    sizes[k - 1] = j - i;
    j = i;
  }
  return sizes;
}

std::string format_sizes(const std::vector<int>& sizes) { return fmt::format("[{}]", fmt::join(sizes, ",")); }

}  // namespace

double StagePartition::max_stage_time() const {
  return stage_time.empty() ? 0.0 : *std::max_element(stage_time.begin(), stage_time.end());
}

std::vector<int> StagePartition::blocks_per_stage() const {
  std::vector<int> sizes;
  sizes.reserve(stages.size());
  for (const auto& range : stages) sizes.push_back(range.size());
  return sizes;
}

namespace {

// The blocks and options, checked before any split; returns each stage's in-flight micro-batches (1 each when the
// options give none).
std::vector<double> checked_inflight(const std::vector<BlockProfile>& blocks, int num_stages,
                                     const PartitionOptions& options) {
  const int n = static_cast<int>(blocks.size());
  CLEAVE_CHECK(num_stages >= 1, "partition: the number of stages must be at least 1, got {}", num_stages);
  CLEAVE_CHECK(n >= num_stages,
               "partition: cannot split {} blocks into {} stages (every stage needs at least one block; use at "
               "most {} stages)",
               n, num_stages, n);
  for (int b = 0; b < n; ++b) {
    CLEAVE_CHECK(std::isfinite(blocks[b].time) && blocks[b].time >= 0.0,
                 "partition: block {} has time {}, expected a finite value >= 0", b, blocks[b].time);
    CLEAVE_CHECK(blocks[b].param_bytes >= 0 && blocks[b].activation_bytes >= 0,
                 "partition: block {} has negative bytes (params {}, activations {})", b, blocks[b].param_bytes,
                 blocks[b].activation_bytes);
  }
  std::vector<double> inflight = options.inflight_microbatches;
  if (inflight.empty()) inflight.assign(num_stages, 1.0);
  CLEAVE_CHECK(static_cast<int>(inflight.size()) == num_stages,
               "partition: inflight_microbatches has {} entries but there are {} stages", inflight.size(),
               num_stages);
  CLEAVE_CHECK(options.memory_cap_bytes >= 0, "partition: memory cap must be >= 0 bytes, got {}",
               options.memory_cap_bytes);
  return inflight;
}

// Prefix sums of the blocks' time, parameter and activation bytes: every segment's cost in O(1).
class Segments {
 public:
  Segments(const std::vector<BlockProfile>& blocks, std::vector<double> inflight)
      : inflight_(std::move(inflight)), time_(blocks.size() + 1, 0.0), params_(blocks.size() + 1, 0.0),
        activations_(blocks.size() + 1, 0.0) {
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      time_[b + 1] = time_[b] + blocks[b].time;
      params_[b + 1] = params_[b] + static_cast<double>(blocks[b].param_bytes);
      activations_[b + 1] = activations_[b] + static_cast<double>(blocks[b].activation_bytes);
    }
  }
  double time(int i, int j) const { return time_[j] - time_[i]; }
  double params(int i, int j) const { return params_[j] - params_[i]; }
  // Blocks [i, j) as stage k: their parameters and k's in-flight micro-batches' activations.
  double memory(int k, int i, int j) const {
    return (params_[j] - params_[i]) + inflight_[k] * (activations_[j] - activations_[i]);
  }

 private:
  std::vector<double> inflight_;
  std::vector<double> time_, params_, activations_;
};

// The smallest largest-stage memory any split reaches (for the messages when a cap cannot be kept).
double smallest_max_memory(const Segments& segments, int n, int num_stages) {
  const auto memory = [&segments](int k, int i, int j) { return segments.memory(k, i, j); };
  auto sizes = min_max_split(n, num_stages, memory);
  CLEAVE_ASSERT(sizes.has_value(), "an uncapped split always exists when blocks >= stages");
  double worst = 0.0;
  int begin = 0;
  for (int k = 0; k < num_stages; ++k) {
    worst = std::max(worst, segments.memory(k, begin, begin + (*sizes)[k]));
    begin += (*sizes)[k];
  }
  return worst;
}

// method manual: blocks_per_stage as given, one entry of at least one block per stage, summing to n.
std::vector<int> manual_sizes(const std::vector<int>& given, int n, int num_stages) {
  CLEAVE_CHECK(static_cast<int>(given.size()) == num_stages,
               "partition: blocks_per_stage {} has {} entries but there are {} stages", format_sizes(given),
               given.size(), num_stages);
  for (std::size_t k = 0; k < given.size(); ++k) {
    CLEAVE_CHECK(given[k] >= 1, "partition: blocks_per_stage {} gives stage {} {} blocks (every stage needs >= 1)",
                 format_sizes(given), k, given[k]);
  }
  const long long sum = std::accumulate(given.begin(), given.end(), 0LL);
  CLEAVE_CHECK(sum == n, "partition: cannot split {} blocks into {} stages with blocks_per_stage {} (sum {} != {})",
               n, num_stages, format_sizes(given), sum, n);
  return given;
}

// Each stage's block count by the options' method (cost keeps every stage under the memory cap, if any).
std::vector<int> stage_sizes(const Segments& segments, int n, int num_stages, const PartitionOptions& options) {
  const double cap = static_cast<double>(options.memory_cap_bytes);
  const bool capped = options.memory_cap_bytes > 0;
  switch (options.method) {
    case PartitionMethod::kUniform: {
      std::vector<int> sizes;
      const int base = n / num_stages, extra = n % num_stages;
      for (int k = 0; k < num_stages; ++k) sizes.push_back(base + (k < extra ? 1 : 0));
      return sizes;
    }
    case PartitionMethod::kParameters: {
      auto split = min_max_split(n, num_stages, [&](int, int i, int j) { return segments.params(i, j); });
      CLEAVE_ASSERT(split.has_value(), "an uncapped split always exists when blocks >= stages");
      return *split;
    }
    case PartitionMethod::kCost: {
      auto split = min_max_split(n, num_stages, [&](int k, int i, int j) {
        if (capped && segments.memory(k, i, j) > cap) return kInfinity;
        return segments.time(i, j);
      });
      CLEAVE_CHECK(split.has_value(),
                   "partition: no split of {} blocks into {} stages keeps every stage under the memory cap of {}; "
                   "the smallest achievable largest-stage memory is {} (raise the cap, use more stages, or use "
                   "smaller micro-batches)",
                   n, num_stages, format_bytes(options.memory_cap_bytes),
                   format_bytes(static_cast<std::int64_t>(std::ceil(smallest_max_memory(segments, n, num_stages)))));
      return *split;
    }
    case PartitionMethod::kManual: return manual_sizes(options.blocks_per_stage, n, num_stages);
  }
  return {};
}

// The stages' ranges from their sizes, with each stage's time, parameter bytes and memory.
StagePartition partition_of_sizes(const std::vector<BlockProfile>& blocks, const Segments& segments,
                                  const std::vector<int>& sizes) {
  const int n = static_cast<int>(blocks.size());
  const int num_stages = static_cast<int>(sizes.size());
  StagePartition result;
  int begin = 0;
  for (int k = 0; k < num_stages; ++k) {
    const BlockRange range{begin, begin + sizes[k]};
    CLEAVE_ASSERT(range.size() >= 1 && range.end <= n, "partitioner produced stage {} = [{}, {})", k, range.begin,
                  range.end);
    double time = 0.0;
    std::int64_t params = 0;
    for (int b = range.begin; b < range.end; ++b) {
      time += blocks[b].time;
      params += blocks[b].param_bytes;
    }
    result.stages.push_back(range);
    result.stage_time.push_back(time);
    result.stage_param_bytes.push_back(params);
    result.stage_memory_bytes.push_back(segments.memory(k, range.begin, range.end));
    begin = range.end;
  }
  CLEAVE_ASSERT(begin == n, "partitioner covered {} of {} blocks", begin, n);
  return result;
}

}  // namespace

StagePartition partition_stages(const std::vector<BlockProfile>& blocks, int num_stages,
                                const PartitionOptions& options) {
  const int n = static_cast<int>(blocks.size());
  const Segments segments(blocks, checked_inflight(blocks, num_stages, options));
  StagePartition result = partition_of_sizes(blocks, segments, stage_sizes(segments, n, num_stages, options));
  // Only method cost splits under the cap; the others are checked against it afterwards.
  const bool capped = options.memory_cap_bytes > 0;
  if (capped && options.method != PartitionMethod::kCost) {
    const double cap = static_cast<double>(options.memory_cap_bytes);
    for (int k = 0; k < num_stages; ++k) {
      CLEAVE_CHECK(result.stage_memory_bytes[k] <= cap,
                   "partition: method '{}' puts {} in stage {} (blocks {}..{}), over the memory cap of {}; the "
                   "smallest achievable largest-stage memory is {} (method 'cost' respects the cap)",
                   enum_name(options.method),
                   format_bytes(static_cast<std::int64_t>(std::ceil(result.stage_memory_bytes[k]))), k,
                   result.stages[k].begin, result.stages[k].end - 1, format_bytes(options.memory_cap_bytes),
                   format_bytes(static_cast<std::int64_t>(std::ceil(smallest_max_memory(segments, n, num_stages)))));
    }
  }
  return result;
}

std::vector<int> place_stages(int pp_size, int virtual_stages, StagePlacement placement) {
  CLEAVE_CHECK(pp_size >= 1, "placement: pp_size must be at least 1, got {}", pp_size);
  CLEAVE_CHECK(virtual_stages >= 1, "placement: virtual stages per rank must be at least 1, got {}", virtual_stages);
  std::vector<int> stage_to_rank(static_cast<std::size_t>(pp_size) * virtual_stages);
  for (int chunk = 0; chunk < virtual_stages; ++chunk) {
    for (int i = 0; i < pp_size; ++i) {
      const bool reversed = placement == StagePlacement::kVShape && chunk % 2 == 1;
      stage_to_rank[chunk * pp_size + i] = reversed ? pp_size - 1 - i : i;
    }
  }
  return stage_to_rank;
}

std::vector<std::vector<int>> stages_by_rank(const std::vector<int>& stage_to_rank, int pp_size) {
  std::vector<std::vector<int>> out(pp_size);
  for (std::size_t s = 0; s < stage_to_rank.size(); ++s) {
    const int rank = stage_to_rank[s];
    CLEAVE_CHECK(rank >= 0 && rank < pp_size, "placement: stage {} is placed on rank {}, expected 0..{}", s, rank,
                 pp_size - 1);
    out[rank].push_back(static_cast<int>(s));
  }
  return out;
}

}  // namespace cleave::partition
