// See zero_units.hpp.
#include "engine/run_plan/zero_units.hpp"

#include <algorithm>
#include <set>

#include "engine/run_plan/param_counts.hpp"

namespace cleave::run_plan {

ZeroThreeUnits zero_three_units(const Plan& plan, int pp_rank, int tp, int dp, int ep) {
  const auto& spec = plan.spec;
  const bool tied = !spec.tied_parameters.empty();
  const std::int64_t table = tp_rank_table_count(spec, tp);  // one tp rank's, as every count below
  std::vector<char> here(spec.blocks.size(), 0);
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.begin; b < range.end; ++b) here[static_cast<std::size_t>(b)] = plan.stage_to_rank(stage) == pp_rank;
  }
  const auto on_rank = [&](int b) { return here[static_cast<std::size_t>(b)] != 0; };
  int embedding = -1, head = -1;  // model blocks on this rank that hold the tied table
  for (int b = 0; b < static_cast<int>(spec.blocks.size()); ++b) {
    const auto kind = spec.blocks[static_cast<std::size_t>(b)].kind;
    if (tied && on_rank(b) && kind == partition::BlockKind::kEmbedding) embedding = b;
    if (tied && on_rank(b) && kind == partition::BlockKind::kLmHead) head = b;
  }
  const bool same_rank = embedding >= 0 && head >= 0;
  ZeroThreeUnits u;
  u.reads.resize(spec.blocks.size());
  u.first_in_bucket.assign(spec.blocks.size(), -1);
  u.expert_unit.assign(spec.blocks.size(), -1);
  const auto add = [&](std::int64_t elements, int group = -1, bool expert = false) {
    group = group > 0 ? group : dp;
    u.numel.push_back(round_up(round_up(elements, kBucketAlignElements), group));
    u.group.push_back(group);
    u.expert.push_back(expert ? 1 : 0);
    return static_cast<int>(u.numel.size()) - 1;
  };
  const int table_unit = tied && !same_rank && (embedding >= 0 || head >= 0) ? add(table) : -1;
  u.table_unit = table_unit;
  for (int b = 0; b < static_cast<int>(spec.blocks.size()); ++b) {
    if (!on_rank(b)) continue;
    const bool holds_table = b == embedding || b == head;
    const auto& block = spec.blocks[static_cast<std::size_t>(b)];
    const std::int64_t experts = tp_rank_expert_elements(block, tp, ep);  // this rank's E / ep, aligned
    // The table's rank holding both its blocks keeps it in the embedding's unit.
    const std::int64_t own = tp_rank_own_elements(block, tp, holds_table && !(same_rank && b == embedding), ep);
    auto& reads = u.reads[static_cast<std::size_t>(b)];
    if (own > 0) {
      reads.push_back(add(own));
      u.first_in_bucket[static_cast<std::size_t>(b)] = reads.back();
    }
    if (experts > 0) {  // over expert-dp
      reads.push_back(add(experts, dp / ep, true));
      u.expert_unit[static_cast<std::size_t>(b)] = reads.back();
    }
    if (holds_table && table_unit >= 0) reads.push_back(table_unit);  // reduced after every block's unit
  }
  // A tied head on the embedding's rank reads the table in the embedding's unit.
  if (same_rank) u.reads[static_cast<std::size_t>(head)].push_back(u.reads[static_cast<std::size_t>(embedding)].front());
  return u;
}

// ZeRO-3: the most unit elements held in full at once on the rank: a block's units and the next block's (same
// pass, same stage: i+1 in a forward, i-1 in a backward) prefetched; a stage of one block holds its own.
std::int64_t gathered_peak(const ZeroThreeUnits& units, const Plan& plan, int pp_rank) {
  std::int64_t peak = 0;
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.begin; b <= std::max(range.begin, range.end - 2); ++b) {  // b and b + 1, or a lone block
      const auto& reads = units.reads[static_cast<std::size_t>(b)];
      std::set<int> held(reads.begin(), reads.end());
      if (b + 1 < range.end) {
        const auto& next = units.reads[static_cast<std::size_t>(b + 1)];
        held.insert(next.begin(), next.end());
      }
      std::int64_t sum = 0;
      for (int unit : held) sum += units.numel[static_cast<std::size_t>(unit)];
      peak = std::max(peak, sum);
    }
  }
  return peak;
}

// ZeRO-3: how far the gradients rise above the full unit buckets while they are reduced, in elements. Buckets
// complete in ready order (the rank's stages by their last weight pass, W or B; each stage's blocks last to
// first, a block's own unit when its weight gradient is done; a tied table split over pp ranks after all of
// them, engine/train/data_parallel.cpp). When bucket k completes, its shard is allocated before its full buffer
// is released, while the buckets before it have each already traded their buffer for their shard: the excess
// is shard_k minus what those trades freed, largest at the first bucket or at a large one right after small ones
// (a final norm's tiny unit first, then a whole transformer block's).
std::int64_t reduction_excess(const ZeroThreeUnits& units, const Plan& plan, int pp_rank) {
  const auto& actions = plan.schedule.ranks[static_cast<std::size_t>(pp_rank)];
  std::vector<int> last_weight_pass(static_cast<std::size_t>(plan.num_stages()), -1);
  for (int k = 0; k < static_cast<int>(actions.size()); ++k) {
    const pipeline::Action& a = actions[static_cast<std::size_t>(k)];
    if (a.kind == pipeline::ActionKind::kBackwardWeight || a.kind == pipeline::ActionKind::kBackward) {
      last_weight_pass[static_cast<std::size_t>(a.stage)] = k;
    }
  }
  std::vector<int> stages;
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (last_weight_pass[static_cast<std::size_t>(stage)] >= 0) stages.push_back(stage);
  }
  std::sort(stages.begin(), stages.end(), [&](int a, int b) {
    return last_weight_pass[static_cast<std::size_t>(a)] < last_weight_pass[static_cast<std::size_t>(b)];
  });
  std::vector<int> order;  // units in the order their buckets complete
  const auto append = [&order](int unit) {
    if (unit >= 0 && std::find(order.begin(), order.end(), unit) == order.end()) order.push_back(unit);
  };
  for (int stage : stages) {
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.end; b-- > range.begin;) {
      append(units.first_in_bucket[static_cast<std::size_t>(b)]);
      append(units.expert_unit[static_cast<std::size_t>(b)]);  // measured: traded with its block (ep_memory_plan_test)
    }
  }
  // The split table's.
  for (int unit = 0; unit < static_cast<int>(units.numel.size()); ++unit) append(unit);
  std::int64_t freed = 0, excess = 0;
  for (int unit : order) {
    const std::int64_t full = units.numel[static_cast<std::size_t>(unit)];
    const int group = units.group[static_cast<std::size_t>(unit)];
    excess = std::max(excess, full / group - freed);
    freed += full - full / group;
  }
  return excess;
}

}  // namespace cleave::run_plan
