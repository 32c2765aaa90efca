// See microbatch_buckets.hpp.
#include "engine/run_plan/microbatch_buckets.hpp"

#include <algorithm>

#include "engine/run_plan/param_counts.hpp"

namespace cleave::run_plan {
namespace {

int add_bucket(MicrobatchBuckets& m, std::int64_t elements, int dp) {
  m.numel.push_back(round_up(round_up(elements, kBucketAlignElements), dp));
  m.writers.push_back(0);
  return static_cast<int>(m.numel.size()) - 1;
}

void add_writer(MicrobatchBuckets& m, int block, int bucket) {
  m.writes[static_cast<std::size_t>(block)].push_back(bucket);
  ++m.writers[static_cast<std::size_t>(bucket)];
}

}  // namespace

// ZeRO-3: one bucket per unit; a tied head on the embedding's rank writes the embedding's unit too; the split
// table's unit is reduced per step; the expert units are not here (reduced per step over expert-dp: the caller adds
// them).
MicrobatchBuckets zero_three_buckets(const ZeroThreeUnits& units, std::size_t blocks) {
  MicrobatchBuckets m;
  m.writes.resize(blocks);
  m.numel = units.numel;
  m.writers.assign(units.numel.size(), 0);
  for (std::size_t u = 0; u < units.numel.size(); ++u) {
    if (units.expert[u]) m.numel[u] = 0;
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    for (int unit : units.reads[b]) {
      if (unit != units.table_unit && !units.expert[static_cast<std::size_t>(unit)]) add_writer(m, static_cast<int>(b), unit);
    }
  }
  if (units.table_unit >= 0) {
    m.per_step = units.numel[static_cast<std::size_t>(units.table_unit)];
    m.numel[static_cast<std::size_t>(units.table_unit)] = 0;  // not a per-micro-batch bucket
  }
  return m;
}

// ZeRO-2: each stage's blocks, last to first, packed whole up to parallel.dp_bucket_mb (a block larger than that
// alone); a tied table both of whose blocks are on this rank a bucket of its own; split over pp ranks, per step.
MicrobatchBuckets zero_two_buckets(const Plan& plan, int pp_rank, int tp, int dp, double bucket_mib, int ep) {
  const auto& spec = plan.spec;
  const bool tied = !spec.tied_parameters.empty();
  const std::int64_t table = tp_rank_table_count(spec, tp);  // one tp rank's, as every count below
  const auto cap = static_cast<std::int64_t>(bucket_mib * 1024.0 * 1024.0) / 4;
  MicrobatchBuckets m;
  m.writes.resize(spec.blocks.size());
  int embedding = -1, head = -1;
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.begin; b < range.end; ++b) {
      const auto kind = spec.blocks[static_cast<std::size_t>(b)].kind;
      if (tied && kind == partition::BlockKind::kEmbedding) embedding = b;
      if (tied && kind == partition::BlockKind::kLmHead) head = b;
    }
  }
  const bool same_rank = embedding >= 0 && head >= 0;
  const int table_bucket = same_rank ? add_bucket(m, table, dp) : -1;
  if (tied && !same_rank && (embedding >= 0 || head >= 0)) {
    m.per_step = round_up(round_up(table, kBucketAlignElements), dp);
  }
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    int open = -1;             // the bucket being packed
    std::int64_t filled = 0;   // its elements so far
    for (int b = range.end; b-- > range.begin;) {
      const bool holds_table = b == embedding || b == head;
      if (holds_table && table_bucket >= 0) add_writer(m, b, table_bucket);
      // ep > 1: the routed experts are in the expert-dp bucketer, reduced per step (the caller adds them).
      // Each tensor from a 64-byte boundary: the block's elements as the bucket lays them out.
      const std::int64_t unit = tp_rank_own_elements(spec.blocks[static_cast<std::size_t>(b)], tp, holds_table, ep);
      if (unit <= 0) continue;
      if (open < 0 || round_up(filled, kBucketAlignElements) + unit > cap) {
        open = add_bucket(m, 0, dp);
        filled = 0;
      }
      filled = round_up(filled, kBucketAlignElements) + unit;
      m.numel[static_cast<std::size_t>(open)] = round_up(round_up(filled, kBucketAlignElements), dp);
      add_writer(m, b, open);
    }
  }
  return m;
}

MicrobatchPeak microbatch_peak(const MicrobatchBuckets& m, const Plan& plan, int pp_rank, int dp, bool staged) {
  const std::size_t n = m.numel.size();
  std::vector<char> open(n, 0);
  std::vector<int> reports(n, 0), launches(n, 0);
  std::int64_t alive = 0, peak = 0;
  int in_flight = -1;
  const auto settle = [&]() {
    if (in_flight < 0) return;
    const std::int64_t size = m.numel[static_cast<std::size_t>(in_flight)];
    if (staged) peak = std::max(peak, alive + size / dp);  // the widened temporary
    else alive -= size;
    in_flight = -1;
  };
  std::int64_t wire = 0;
  for (const pipeline::Action& a : plan.schedule.ranks[static_cast<std::size_t>(pp_rank)]) {
    if (a.kind != pipeline::ActionKind::kBackwardWeight && a.kind != pipeline::ActionKind::kBackward) continue;
    const auto& range = plan.partition.stages[static_cast<std::size_t>(a.stage)];
    for (int b = range.end; b-- > range.begin;) {
      for (int k : m.writes[static_cast<std::size_t>(b)]) {
        if (!open[static_cast<std::size_t>(k)]) {
          open[static_cast<std::size_t>(k)] = 1;
          alive += m.numel[static_cast<std::size_t>(k)];
        }
      }
      peak = std::max(peak, alive);
      for (int k : m.writes[static_cast<std::size_t>(b)]) {
        const auto kk = static_cast<std::size_t>(k);
        if (++reports[kk] < (launches[kk] + 1) * m.writers[kk]) continue;
        ++launches[kk];
        settle();
        if (!open[kk]) continue;  // its contributions went out with the previous launch
        open[kk] = 0;
        if (staged) alive -= m.numel[kk], wire = std::max(wire, m.numel[kk]);
        in_flight = k;
      }
    }
  }
  settle();
  MicrobatchPeak result;
  result.gradients = m.shards() / dp + m.per_step + std::max(peak, m.per_step / dp);
  result.wire = wire;
  return result;
}

}  // namespace cleave::run_plan
