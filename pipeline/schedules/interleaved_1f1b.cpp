// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM): each rank holds v ≥ 2 model chunks, looped
// placement (stage c·p + r on rank r), so a micro-batch visits every rank v times and the fill/drain
// bubble shrinks by about v.
//
// Ordering rule. Micro-batches are split into groups: k = ⌊m/p⌋ groups whose sizes differ by at most one,
// larger groups first (so every group holds between p and 2p − 1 micro-batches); when m < p there is one
// group of m. Forward order on every rank: group by group, and inside a group chunk 0 for all its
// micro-batches, then chunk 1, …, chunk v−1. Backward order: the same with the chunks reversed. Rank r runs
// W_r forwards, then alternates (next forward, next backward), then drains the backwards.
// This is how m need not be a multiple of p: Megatron's fixed groups of p leave a short last group, which
// with the same warm-up deadlocks for some m (e.g. p = 5, v = 2, m = 7); merging the remainder into the
// leading groups keeps every group ≥ p, which is what the warm-up below assumes.
// Warm-up: W_r = min(2(p − 1 − r) + (v − 1)·g₀, v·m), g₀ = size of the first group.
// Memory bound: min(v·m, W_r + 1) live chunk stashes on rank r; rank 0: 2p − 1 + (v − 1)·g₀ at most,
// i.e. ≤ (2p − 1)·v chunk stashes ≈ (2p − 1) full-rank stashes when a chunk is 1/v of the rank's layers.
// Bubble with uniform per-chunk costs F, B: every rank idles (F + B)·((p − 1) + (v − 1)·max(0, p − m)), so
// bubble_fraction = (p − 1) / (v·m + p − 1) for m ≥ p (exactly the published 1/v form) and
// (v·(p − m) + m − 1) / (v·p + m − 1) for m < p (docs/schedules.md; asserted in the unit tests).
#include <algorithm>
#include <utility>

#include "engine/core/error.hpp"
#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::pipeline {
namespace {

std::vector<int> group_sizes(int p, int m) {
  if (m < p) return {m};
  const int k = m / p, base = m / k, extra = m % k;
  std::vector<int> sizes;
  for (int g = 0; g < k; ++g) sizes.push_back(base + (g < extra ? 1 : 0));
  return sizes;
}

}  // namespace

Schedule interleaved_1f1b_schedule(int pp_size, int num_microbatches, int virtual_stages) {
  detail::check_generator_args("interleaved_1f1b", pp_size, num_microbatches);
  CLEAVE_CHECK(virtual_stages >= 2,
               "schedule interleaved_1f1b needs at least 2 virtual stages per rank, got {} (use 1f1b for one stage "
               "per rank)",
               virtual_stages);
  const int p = pp_size, m = num_microbatches, v = virtual_stages;
  Schedule schedule = make_empty_schedule("interleaved_1f1b", p, m, v,
                                          partition::place_stages(p, v, partition::StagePlacement::kLooped));

  // (chunk, micro-batch) in forward and backward order; the same on every rank.
  const std::vector<int> groups = group_sizes(p, m);
  std::vector<std::pair<int, int>> forward_order, backward_order;
  int first = 0;
  for (int size : groups) {
    for (int c = 0; c < v; ++c) {
      for (int j = first; j < first + size; ++j) forward_order.push_back({c, j});
    }
    for (int c = v - 1; c >= 0; --c) {
      for (int j = first; j < first + size; ++j) backward_order.push_back({c, j});
    }
    first += size;
  }
  const int total = v * m;
  for (int r = 0; r < p; ++r) {
    auto& actions = schedule.ranks[r];
    auto push = [&](ActionKind kind, std::pair<int, int> chunk_mb) {
      actions.push_back({kind, chunk_mb.first * p + r, chunk_mb.second});
    };
    const int warmup = std::min(2 * (p - 1 - r) + (v - 1) * groups.front(), total);
    for (int i = 0; i < warmup; ++i) push(ActionKind::kForward, forward_order[i]);
    for (int i = 0; i < total - warmup; ++i) {
      push(ActionKind::kForward, forward_order[warmup + i]);
      push(ActionKind::kBackward, backward_order[i]);
    }
    for (int i = total - warmup; i < total; ++i) push(ActionKind::kBackward, backward_order[i]);
  }
  return schedule;
}

}  // namespace cleave::pipeline
