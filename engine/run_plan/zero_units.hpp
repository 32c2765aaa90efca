// ZeRO-3's parameter units on one pp rank: which parameters each unit holds, how the gradient bucketer pads it, the
// most units held in full at once (the gathered parameters) and how far the gradients rise while the unit buckets
// are reduced per step. Invariant: a unit's size is the gradient bucket's layout (engine/comm/gradient_bucketer.cpp)
// counted in one tp rank's f32 elements, so parameters, gradients and optimizer state of ZeRO-3 derive from it.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/run_plan/plan.hpp"

namespace cleave::run_plan {

inline std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// ZeRO-3's units on one pp rank (memory_plan.hpp): one per block of a stage, holding the parameters whose
// first block in the stage it is (a tied table split over pp ranks is a unit of its own; held by the same rank as
// its head, it is in the embedding's unit), each as its gradient bucket lays it out
// (engine/comm/gradient_bucket_layout.cpp): each parameter tensor's gradient from a 64-byte boundary (16 f32
// elements; partition::block_param_tensors lists the tensors), the unit padded to 64 bytes, then to a multiple of dp.
// Expert parallelism (ep > 1): a moe block's routed experts on this rank (E / ep of them) are a unit of their own,
// sharded over the expert-dp group (dp × cp / ep ranks) and reduced after the other units
// (engine/train/data_parallel.hpp); the block reads both of its units.
struct ZeroThreeUnits {
  int table_unit = -1;                  // a tied table split over pp ranks: its own unit (else -1)
  std::vector<std::int64_t> numel;      // f32 elements of each unit, padded, one tp rank's
  std::vector<int> group;               // per unit: the ranks that shard it (dp × cp, or expert-dp)
  std::vector<char> expert;             // per unit: a block's routed experts (reduced once per step)
  std::vector<std::vector<int>> reads;  // per model block on this rank: the units its forward and I gather
  std::vector<int> first_in_bucket;     // per model block: its own unit, complete after its W (-1: none)
  std::vector<int> expert_unit;         // per model block: its experts' unit under ep > 1 (-1: none)
  std::int64_t total() const { return std::accumulate(numel.begin(), numel.end(), std::int64_t{0}); }
  // The elements this rank keeps: each unit's shard.
  std::int64_t shards() const {
    std::int64_t sum = 0;
    for (std::size_t u = 0; u < numel.size(); ++u) sum += numel[u] / group[u];
    return sum;
  }
  // The expert units: their elements in full, and the largest one's shard.
  std::int64_t expert_total() const {
    std::int64_t sum = 0;
    for (std::size_t u = 0; u < numel.size(); ++u) sum += expert[u] ? numel[u] : 0;
    return sum;
  }
  std::int64_t largest_expert_shard() const {
    std::int64_t most = 0;
    for (std::size_t u = 0; u < numel.size(); ++u) most = std::max(most, expert[u] ? numel[u] / group[u] : 0);
    return most;
  }
};

ZeroThreeUnits zero_three_units(const Plan& plan, int pp_rank, int tp, int dp, int ep);

// ZeRO-3: the most unit elements held in full at once on the rank (gathered_peak in zero_units.cpp).
std::int64_t gathered_peak(const ZeroThreeUnits& units, const Plan& plan, int pp_rank);

// ZeRO-3: how far the gradients rise above the full unit buckets while they are reduced, in elements
// (reduction_excess in zero_units.cpp).
std::int64_t reduction_excess(const ZeroThreeUnits& units, const Plan& plan, int pp_rank);

}  // namespace cleave::run_plan
