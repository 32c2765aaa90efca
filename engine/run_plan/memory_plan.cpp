// See memory_plan.hpp.
#include "engine/run_plan/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "engine/core/error.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/cp_rules.hpp"
#include "partition/ep_costs.hpp"
#include "pipeline/p2p_posting.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::run_plan {
namespace {

// One tp rank's parameters of a block: its replicated ones (norms, row-parallel biases, positions, a router) whole,
// the rest ÷ tp, a vocab-parallel table (embedding, lm head) as ceil(V / tp) rows (layers/parallel/shard.hpp pads
// the vocabulary to a multiple of tp). Before the replicated ones were divided by tp too: 1.1% under the measured
// parameters, gradients and optimizer state at ep2 x tp2 (ExpertParallel.MemoryPlanFollowsTheMeasuredPeakAtEpTimesTp).
std::int64_t tp_rank_param_count(const partition::BlockSpec& block, const partition::BlockCost& cost, int tp) {
  if (tp <= 1) return cost.param_count;
  std::int64_t split = cost.param_count - cost.replicated_param_count;
  std::int64_t table = 0;
  if (block.kind == partition::BlockKind::kEmbedding || block.kind == partition::BlockKind::kLmHead) {
    const std::int64_t d = block.kind == partition::BlockKind::kEmbedding ? block.out_features : block.in_features;
    split -= block.vocab_size * d;
    table = (block.vocab_size + tp - 1) / tp * d;
  }
  return cost.replicated_param_count + split / tp + table;
}

// One tp rank's elements of a tied token table (vocab-parallel: ceil(V / tp) rows), 0 when untied.
std::int64_t tp_rank_table_count(const partition::ModelSpec& spec, int tp) {
  if (spec.tied_parameters.empty()) return 0;
  return (spec.token_sizes().vocab_size + tp - 1) / tp * spec.token_sizes().d_model;
}

// One tp rank's elements of a block that go into its ZeRO-2 bucket or ZeRO-3 unit: tp_rank_param_count less the
// tied table (its own unit or bucket, or the embedding's) and, at ep > 1, the routed experts (split over tp, in
// the expert-dp bucketer).
std::int64_t tp_rank_own_count(const partition::BlockSpec& block, const partition::BlockCost& cost, int tp,
                               std::int64_t table, bool holds_table, int ep) {
  const std::int64_t experts = ep > 1 ? partition::expert_param_count(block) / tp : 0;
  return tp_rank_param_count(block, cost, tp) - (holds_table ? table : 0) - experts;
}

// CPU mixed precision on the widened GEMM path (CpuKernels::bf16_gemm.bf16_kernels false: device.blas openblas or
// blis, or a CPU without bf16 instructions): a GEMM's three bf16 operands are widened into f32 scratch for the GEMM's
// duration (kernels/ops/cpu_f32_view.hpp, the weight's working copy included), and an op that widens a block's output
// whole holds three such tensors. On oneDNN's bf16 kernels (device.blas auto or onednn on a CPU with bf16
// instructions) the GEMMs widen nothing but a bias row, and the training step's all-bf16 calls of the other ops widen
// per chunk, block or row (kernels/ops/cpu_chunked_view.hpp, rope, kernels/cpu/flash_attention.hpp): the workspace
// is then the attention kernel's scratch (cpu_attention_scratch_bytes). Measured on a CPU with bf16 instructions
// (TrainE2E.Bf16WorkspacePlanMatchesTheAllocator, tiny GPT): 49,608 B at micro-batch 1 and 49,560 B at 4, the
// attention scratch's 49,536 B, where this figure gave 24,576 and 98,304. Bytes for `micro` samples on one tp rank.
std::int64_t cpu_bf16_widening_bytes(const partition::BlockSpec& block, const partition::BlockCost& shard,
                                     partition::Recompute recompute, int tp, std::int64_t micro) {
  const partition::BlockWork work = partition::block_work(block, DType::kBF16, recompute, tp, micro);
  double widest = 0;
  for (const auto* pass : {&work.forward, &work.input_grad, &work.weight_grad}) {
    for (const auto& gemm : pass->gemms) widest = std::max(widest, gemm.operand_bytes(4.0));
  }
  const double samples = static_cast<double>(micro);
  widest = std::max(widest, 3.0 * static_cast<double>(shard.output_bytes) * samples);
  return static_cast<std::int64_t>(widest);
}

// ZeRO-3's units on one pp rank (memory_plan.hpp): one per block of a stage, holding the parameters whose
// first block in the stage it is (a tied table split over pp ranks is a unit of its own; held by the same rank as
// its head, it is in the embedding's unit), each as its gradient bucket lays it out
// (engine/comm/gradient_bucketer.cpp): padded to 64 bytes (16 f32 elements), then to a multiple of dp. The
// 64-byte alignment of each gradient inside a unit is not modelled (at most 60 bytes per parameter tensor).
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

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

ZeroThreeUnits zero_three_units(const Plan& plan, int pp_rank, int tp, int dp, int ep) {
  constexpr std::int64_t kAlignElements = 16;  // gradient_bucketer.cpp's kAlignBytes / 4
  const auto& spec = plan.spec;
  const auto costs = partition::model_costs(spec, DType::kF32);
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
    u.numel.push_back(round_up(round_up(elements, kAlignElements), group));
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
    const std::int64_t experts = ep > 1 ? partition::expert_param_count(block) / tp : 0;
    std::int64_t own = tp_rank_own_count(block, costs[static_cast<std::size_t>(b)], tp, table, holds_table, ep);
    if (same_rank && b == embedding) own += table;
    auto& reads = u.reads[static_cast<std::size_t>(b)];
    if (own > 0) {
      reads.push_back(add(own));
      u.first_in_bucket[static_cast<std::size_t>(b)] = reads.back();
    }
    if (experts > 0) {  // this rank's E / ep, over expert-dp
      reads.push_back(add(experts / ep, dp / ep, true));
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

// Per-micro-batch reduction (optimizer.zero_reduce per_microbatch, engine/comm/gradient_bucketer.hpp): the
// buckets as the runtime cuts them, each with the model blocks whose weight-gradient pass writes into it.
struct MicrobatchBuckets {
  std::vector<std::int64_t> numel;                 // f32 elements, padded like the bucketer (16, then dp)
  std::vector<std::vector<int>> writes;             // per model block: the buckets its W writes
  std::vector<int> writers;                         // per bucket: reports of one micro-batch (blocks writing it)
  std::int64_t per_step = 0;                        // a tied table split over pp ranks: reduced once per step
  std::int64_t shards() const {
    std::int64_t sum = 0;
    for (std::int64_t n : numel) sum += n;
    return sum;
  }
};

int add_bucket(MicrobatchBuckets& m, std::int64_t elements, int dp) {
  constexpr std::int64_t kAlignElements = 16;
  m.numel.push_back(round_up(round_up(elements, kAlignElements), dp));
  m.writers.push_back(0);
  return static_cast<int>(m.numel.size()) - 1;
}

void add_writer(MicrobatchBuckets& m, int block, int bucket) {
  m.writes[static_cast<std::size_t>(block)].push_back(bucket);
  ++m.writers[static_cast<std::size_t>(bucket)];
}

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
  constexpr std::int64_t kAlignElements = 16;
  const auto& spec = plan.spec;
  const auto costs = partition::model_costs(spec, DType::kF32);
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
  if (tied && !same_rank && (embedding >= 0 || head >= 0)) m.per_step = round_up(round_up(table, kAlignElements), dp);
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    int open = -1;             // the bucket being packed
    std::int64_t filled = 0;   // its elements so far
    for (int b = range.end; b-- > range.begin;) {
      const bool holds_table = b == embedding || b == head;
      if (holds_table && table_bucket >= 0) add_writer(m, b, table_bucket);
      // ep > 1: the routed experts are in the expert-dp bucketer, reduced per step (the caller adds them).
      const std::int64_t own = tp_rank_own_count(spec.blocks[static_cast<std::size_t>(b)],
                                                 costs[static_cast<std::size_t>(b)], tp, table, holds_table, ep);
      if (own <= 0) continue;
      const std::int64_t unit = round_up(own, kAlignElements);
      if (open < 0 || round_up(filled, kAlignElements) + unit > cap) {
        open = add_bucket(m, 0, dp);
        filled = 0;
      }
      filled = round_up(filled, kAlignElements) + unit;
      m.numel[static_cast<std::size_t>(open)] = round_up(round_up(filled, kAlignElements), dp);
      add_writer(m, b, open);
    }
  }
  return m;
}

// The gradient peak of a step reduced per micro-batch, in elements, and the largest wire copy (bf16 wire):
// this rank's shards (all allocated when the step begins) plus the most bucket buffers alive at once, walking the
// rank's weight-gradient passes (W or B) in schedule order, each stage's blocks last to first. Before a block
// writes, the buckets it writes are allocated if they are not; after it, a bucket with all its writers' reports
// of the micro-batch is launched: the bucket in flight before it is completed and freed first, then it is in
// flight (its f32 buffer; under a bf16 wire its bf16 copy instead, and completing it widens its block into a
// temporary shard). A tied table split over pp ranks is held in full through the step and its shard appears at
// the step's end (reduced once per step).
struct MicrobatchPeak {
  std::int64_t gradients = 0, wire = 0;
};

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

// Context-parallel attention (layers/attention_core.hpp) keeps, per attention block and sample, more than the
// one-rank core the cost model prices (whose figures the plan divides by cp), where the core's output is also
// the output projection's stashed input (one storage). Whole-sequence bytes of [T, D/tp], like the costs.
//  - ring (ring_attention.hpp): the stash holds chunk-major copies of q, k, v (in place of qkv: the same bytes)
//    and of the two chunks' outputs besides the assembled output: one [T, D/tp] more. Its backward holds dout's
//    chunk copies and the dq chunks until dqkv is assembled: two more. Selective recomputation reruns the
//    forward ring inside the backward (q, k, v and the output chunks: four more, on top of the statistics the
//    cost model counts). dK and dV travel in communication buffers, the block partials in the workspace.
//  - all_to_all (ulysses.hpp): the stash holds the core's output in the heads layout besides the exchanged-back
//    output the projection keeps: one more, with or without selective recomputation. Its backward holds dout in
//    the heads layout and dqkv in both layouts: four more.
// With grouped-query attention (Llama, Hkv < H) k and v are [T, K/tp], K = Hkv·hd, so "q, k, v" above is
// [T, (D + 2K)/tp] and all_to_all's second dqkv likewise.
// Full recomputation rebuilds the larger stash inside the backward.
void add_cp_attention_state(partition::BlockCost& cost, const partition::BlockSpec& block,
                            partition::Recompute recompute, int tp, bool ring) {
  if (block.n_heads <= 0) return;  // a block without attention (embedding, head, MLP and CNN layers)
  const std::int64_t td = block.seq_len * block.in_features / tp * 4;  // f32; bf16 halves all activations below
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t tqkv = block.seq_len * (block.in_features + 2 * kv_heads * (block.in_features / block.n_heads)) /
                            tp * 4;  // packed q | k | v
  const bool stashed = ring ? recompute == partition::Recompute::kNone : recompute != partition::Recompute::kFull;
  if (stashed) cost.activation_bytes += td;
  std::int64_t extra = ring ? 2 * td : td + tqkv;
  if (ring && recompute == partition::Recompute::kSelective) extra += tqkv + td;
  if (recompute == partition::Recompute::kFull) extra += td;
  cost.backward_extra_bytes += extra;
}

}  // namespace

// Context parallelism's exchange buffers (MemoryCategory::kCommunication), per attention block and micro-batch of
// b samples: Tl = T / cp tokens, Q = D / tp query and K = Hkv·hd / tp key (and value) columns per token, s bytes an
// element (4; bf16 2). See memory_plan.hpp for the formula and ring_attention.cpp / ulysses.cpp for the buffers.
std::int64_t cp_exchange_bytes(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp, bool ring,
                               std::int64_t dtype_bytes) {
  if (cp <= 1 || block.n_heads <= 0) return 0;  // no exchange, or a block without attention
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t q_cols = block.in_features / tp;
  const std::int64_t kv_cols = kv_heads * (block.in_features / block.n_heads) / tp;
  const std::int64_t local_tokens = micro * (block.seq_len / cp);
  if (ring) {
    // One rank's K/V blocks (k and v, both chunks): U. Forward: the held block and the next in flight, 2U from
    // step 1 on. Backward: the travelling dK/dV and its rotation target (2U) besides the K/V in flight: the next
    // block (steps before the last) and the held one (steps after the first), 4U at cp >= 3, 3U at cp 2.
    const std::int64_t unit = local_tokens * 2 * kv_cols * dtype_bytes;
    return (2 + std::min(cp - 1, 2)) * unit;
  }
  // all_to_all: an exchange of a [b, Tl, W] tensor holds cp send blocks and cp - 1 receive blocks of W / cp
  // columns (the own block is not copied twice); the widest is q | k | v (forward) and dqkv (backward).
  return (2 * cp - 1) * local_tokens * ((q_cols + 2 * kv_cols) / cp) * dtype_bytes;
}

StageBackwardMemory stage_backward_memory(const std::vector<partition::BlockCost>& blocks) {
  StageBackwardMemory m;
  for (const auto& b : blocks) m.forward_stash += b.activation_bytes, m.weight_stash += b.weight_stash_bytes;
  // Backward visits the blocks last to first. The stage's last block's dy is the boundary tensor received,
  // counted with the transfers in flight, not again here.
  std::int64_t input_offset = 0, fused_offset = 0;  // held above the action's start when block b begins
  std::int64_t weight_offset = 0;                   // the same for a split W (it starts holding every weight stash)
  for (std::size_t k = blocks.size(); k-- > 0;) {
    const auto& b = blocks[k];
    const std::int64_t extra = b.backward_extra_bytes - (k + 1 == blocks.size() ? b.output_bytes : 0);
    m.input_peak = std::max(m.input_peak, input_offset + extra);
    m.fused_peak = std::max(m.fused_peak, fused_offset + extra);
    // B's W of the block runs after its I has traded its stash for what W needs.
    m.fused_peak = std::max(m.fused_peak, fused_offset + b.weight_stash_bytes - b.activation_bytes + b.weight_extra_bytes);
    m.weight_peak = std::max(m.weight_peak, weight_offset + b.weight_extra_bytes);
    input_offset += b.weight_stash_bytes - b.activation_bytes;  // I keeps what W needs
    fused_offset -= b.activation_bytes;                         // B's W frees the block's stash
    weight_offset -= b.weight_stash_bytes;                      // W frees it
  }
  return m;
}

std::int64_t MemoryPlan::total() const {
  std::int64_t sum = 0;
  for (auto b : bytes) sum += b;
  return sum;
}

std::string MemoryPlan::breakdown() const {
  std::string out;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    if (bytes[static_cast<std::size_t>(c)] == 0) continue;
    out += fmt::format("{} {}, ", memory_category_name(static_cast<MemoryCategory>(c)),
                       format_bytes(bytes[static_cast<std::size_t>(c)]));
  }
  return out + "total " + format_bytes(total());
}

CpuKernels unresolved_cpu_kernels(const config::RunConfig& config) {
  CpuKernels cpu;
  cpu.bf16_gemm = ops::choose_cpu_gemm(config.device.blas, /*bf16_operands=*/true,
                                       ops::build_cpu_blas_facts(/*onednn_bf16_instructions=*/false));
  return cpu;
}

// The per-thread floats of kernels/cpu/flash_attention.cpp (per_thread_floats, its block sizes kFlashBlockQ 64 and
// kFlashBlockK 128): the forward's score block, accumulator and row statistics, the backward's two score blocks and
// key-block gradients; bf16 adds the widened q, k, v blocks and the backward's f32 dQ of a kv head's query heads.
// Kept equal to the kernel's by MemoryPlanCpu.AttentionScratchIsTheKernels (tests/unit/run_plan).
std::int64_t cpu_attention_scratch_bytes(const partition::BlockSpec& block, int threads, bool bf16) {
  if (block.n_heads <= 0 || threads <= 0) return 0;
  const std::int64_t t = block.seq_len, hd = block.in_features / block.n_heads;
  const std::int64_t kv_heads = block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads;
  const std::int64_t group = block.n_heads / kv_heads;  // the same at every tp (both are split by it)
  const std::int64_t bq = std::max<std::int64_t>(1, std::min<std::int64_t>(64, t));
  const std::int64_t bk = std::max<std::int64_t>(1, std::min<std::int64_t>(128, t));
  const std::int64_t forward = bq * bk + bq * hd + 2 * bq, backward = 2 * bq * bk + bq + 2 * bk * hd;
  const std::int64_t floats = bf16 ? std::max(forward + bq * hd + 2 * bk * hd,
                                              backward + 3 * bq * hd + 2 * bk * hd + group * t * hd + hd)
                                   : std::max(forward, backward);
  return 4 * threads * floats;
}

MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, double ep_imbalance) {
  return estimate_rank_memory(plan, config, pp_rank, unresolved_cpu_kernels(config), ep_imbalance);
}

MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, const CpuKernels& cpu,
                                double ep_imbalance) {
  const int tp = config.parallel.tensor_model_parallel_size;
  // Parameters: whole-model (÷ tp below); activations: one tp rank's (the cost model's tp layout).
  const partition::Recompute recompute = config.train.recompute;
  const auto costs = partition::model_costs(plan.spec, DType::kF32, recompute);
  const bool sp = config.parallel.sequence_parallel && tp > 1;  // residual stream split along the sequence
  const auto shard = partition::model_costs(plan.spec, DType::kF32, recompute, tp, sp);
  const std::int64_t micro = config.resolved_batch().micro_batch_size;
  // Context parallelism: every activation holds T / cp tokens of each sample (the attention state too: all_to_all
  // keeps heads / cp of the whole sequence), and gradients and ZeRO shards spread over dp × cp ranks.
  const int cp = std::max(1, config.parallel.context_parallel_size);
  const int dp = std::max(1, config.parallel.data_parallel_size) * cp;
  const bool ring = cp > 1 && config.parallel.context_parallel_comm == config::ContextParallelComm::kRing;
  // Expert parallelism (partition/ep_costs.hpp): a rank holds E / ep of each moe block's experts and runs the rows
  // its experts receive, imbalance x the mean on the busiest rank.
  const int ep = std::max(1, config.parallel.expert_model_parallel_size);
  const double imbalance =
      ep == 1 ? 1.0
      : ep_imbalance > 0 ? ep_imbalance
                         : partition::workload_ep_imbalance(plan.spec, config.resolved_batch().micro_batch_size, cp, ep);
  const bool bf16 = config.device.precision == config::Precision::kBf16;
  const bool on_cpu = config.device.type == DeviceType::kCpu;
  const bool widens = bf16 && on_cpu && !cpu.bf16_gemm.bf16_kernels;  // see cpu_bf16_widening_bytes
  std::int64_t param_bytes = 0;   // f32 bytes of the parameters one tp rank of this pp rank holds (all E experts)
  std::int64_t largest_output = 0;
  std::int64_t cpu_scratch = 0;   // the CPU kernels' scratch: bf16 operands widened, the attention kernel's blocks
  std::int64_t expert_bytes = 0;  // f32 bytes of the routed experts of the rank's blocks (all E of each), ÷ tp
  std::int64_t cp_exchange = 0;   // the largest cp exchange of the rank's attention blocks (one runs at a time)
  // Per stage held by this rank, per sample: its blocks' costs in model order (one tp rank's).
  std::vector<std::vector<partition::BlockCost>> stage_blocks(static_cast<std::size_t>(plan.num_stages()));
  // Per stage held by this rank, per sample: its input and output boundary tensors (0 at the model's ends).
  std::vector<std::int64_t> stage_in(static_cast<std::size_t>(plan.num_stages()), 0), stage_out = stage_in;
  // With tied embeddings the token table appears in the embedding's and the head's cost; a rank holding
  // both (ZB-V) shares one Param, so the second occurrence adds only what is not the table.
  const bool tied = !plan.spec.tied_parameters.empty();
  std::int64_t table_bytes = 0;  // one tp rank's
  if (tied) table_bytes = (plan.spec.token_sizes().vocab_size + tp - 1) / tp * plan.spec.token_sizes().d_model * 4;
  bool table_seen = false;
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    const auto& range = plan.partition.stages[static_cast<std::size_t>(stage)];
    for (int b = range.begin; b < range.end; ++b) {
      const auto& block = plan.spec.blocks[static_cast<std::size_t>(b)];
      const auto& c = costs[static_cast<std::size_t>(b)];
      const bool holds_table = tied && (block.kind == partition::BlockKind::kEmbedding ||
                                        block.kind == partition::BlockKind::kLmHead);
      const std::int64_t rank_bytes = 4 * tp_rank_param_count(block, c, tp);
      param_bytes += holds_table && table_seen ? rank_bytes - table_bytes : rank_bytes;
      table_seen = table_seen || holds_table;
      expert_bytes += 4 * partition::expert_param_count(block) / tp;
      partition::BlockCost a = shard[static_cast<std::size_t>(b)];
      if (cp > 1) add_cp_attention_state(a, block, recompute, tp, ring);
      cp_exchange = std::max(cp_exchange, cp_exchange_bytes(block, micro, tp, cp, ring, bf16 ? 2 : 4));
      if (ep > 1) partition::add_ep_expert_rows(a, block, DType::kF32, recompute, tp, imbalance, sp);
      stage_blocks[static_cast<std::size_t>(stage)].push_back(a);
      largest_output = std::max(largest_output, a.output_bytes);
      if (widens) {
        cpu_scratch = std::max(cpu_scratch, cpu_bf16_widening_bytes(block, a, recompute, tp, micro));
      }
      // The CPU attention kernel's per-thread scratch (whole sequences; under cp its chunks' are not counted).
      if (on_cpu && cp == 1) cpu_scratch = std::max(cpu_scratch, cpu_attention_scratch_bytes(block, cpu.threads, bf16));
    }
    // Boundary tensors: what the stage receives (the previous block's output) and what it sends (its own).
    // Under sequence parallelism they are one tp rank's sequence shards.
    const auto& sent = sp ? shard : costs;
    const auto st = static_cast<std::size_t>(stage);
    if (stage > 0) stage_in[st] = sent[static_cast<std::size_t>(range.begin - 1)].output_bytes;
    if (stage + 1 < plan.num_stages()) stage_out[st] = sent[static_cast<std::size_t>(range.end - 1)].output_bytes;
  }
  std::vector<StageBackwardMemory> stage_memory(stage_blocks.size());
  for (std::size_t si = 0; si < stage_blocks.size(); ++si) {
    if (!stage_blocks[si].empty()) stage_memory[si] = stage_backward_memory(stage_blocks[si]);
  }
  const auto& actions = plan.schedule.ranks[static_cast<std::size_t>(pp_rank)];
  // The rank runs its actions in order: walk them, F adding a stage's forward stash, I trading it for what W
  // needs, W or a fused B freeing it; inside I and B each block's backward holds its extra, inside W and B each
  // block's weight gradient its weight extra (the stage summary above says how high that goes above what was
  // held when the action started). Beside the stashes, the boundary tensors alive (`in_flight`, per sample): the
  // receive buffers posted and not yet consumed (a communication block's own receives and the next block's, posted
  // early: pipeline/p2p_posting.hpp), an I's or B's own dy through it, a compute action's output at its end and,
  // when sent, through the next compute action (the executor tests its sends after each action: a send whose receive
  // the peer posted early has usually completed by then, but may not have, so the plan takes the later end), and an
  // output handed to a stage of the same rank (ZB-V's turn) until that stage consumes it. Measured at tp2 x pp2
  // under zb_h1 (SequenceParallel.SplitBackwardMemoryFollowsThePlan): the last stage to the byte; the first stage to
  // the byte on the tp rank whose send was still in flight in its I, one boundary tensor (1.9%) over it on the other
  // (run to run); the former flat three boundary tensors put the plan 1.1-1.9% (first stage) and 4.7-7.8% (last
  // stage) over the measured peak.
  using Key = std::pair<int, int>;  // (stage, micro-batch)
  std::map<Key, std::int64_t> forward_in, backward_in;  // posted receives or same-rank hand-overs, not consumed yet
  std::int64_t in_flight = 0;
  std::set<Key> sends_forward, sends_backward;  // the outputs this rank sends (the rest are handed over in place)
  for (const auto& a : actions) {
    if (a.kind == pipeline::ActionKind::kSendF) sends_forward.insert({a.stage, a.microbatch});
    if (a.kind == pipeline::ActionKind::kSendB) sends_backward.insert({a.stage, a.microbatch});
  }
  std::map<std::size_t, const pipeline::P2PBlock*> block_at;
  const std::vector<pipeline::P2PBlock> p2p = pipeline::p2p_blocks(actions);
  for (const auto& block : p2p) block_at[block.first] = &block;
  const auto post = [&](const pipeline::Action& r) {
    const auto st = static_cast<std::size_t>(r.stage);
    if (r.kind == pipeline::ActionKind::kRecvF) forward_in[{r.stage, r.microbatch}] = stage_in[st];
    if (r.kind == pipeline::ActionKind::kRecvB) backward_in[{r.stage, r.microbatch}] = stage_out[st];
    in_flight += r.kind == pipeline::ActionKind::kRecvF ? stage_in[st] : stage_out[st];
  };
  const auto take = [&](std::map<Key, std::int64_t>& from, const Key& key) {
    auto it = from.find(key);
    if (it == from.end()) return std::int64_t{0};
    const std::int64_t bytes = it->second;
    from.erase(it);
    in_flight -= bytes;
    return bytes;
  };
  // A rank holding the first and the last stage (ZB-V, DualPipeV) reads a micro-batch's data twice: the first stage's
  // F takes its inputs, and its targets (i32, the loss block's rows) wait in the executor until the last stage's F
  // takes them into the loss's stash (pipeline/executor.cpp, take_data). Before they were counted the plan was 512 B
  // under the measured peak on rank 0 at pp2 under ZB-V and DualPipeV (two micro-batches' targets, T 32, micro-batch
  // 2: ScheduleMemory.EveryScheduleFollowsThePlan). Under bf16 they are halved with the walk's other bytes (2 B per
  // token under the i32 they are), as the f32 statistics are.
  const int last_stage = plan.num_stages() - 1;
  const auto& loss_block = plan.spec.blocks.back();
  const std::int64_t targets_bytes =
      last_stage > 0 && plan.stage_to_rank(0) == pp_rank && plan.stage_to_rank(last_stage) == pp_rank &&
              loss_block.kind == partition::BlockKind::kSoftmaxCrossEntropy
          ? loss_block.input.rows() * static_cast<std::int64_t>(sizeof(std::int32_t))
          : 0;
  std::set<int> targets_waiting;  // micro-batches whose targets the executor holds
  std::int64_t held = 0, peak_stash = 0;
  std::int64_t sending = 0;  // the previous compute action's sent output, until this one's end
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const auto& a = actions[i];
    if (auto found = block_at.find(i); found != block_at.end()) {
      for (std::size_t k : found->second->posted) {
        if (pipeline::is_recv(actions[k].kind)) post(actions[k]);
      }
      for (std::size_t k : found->second->next_receives) post(actions[k]);
    }
    if (a.stage < 0 || !pipeline::is_compute(a.kind)) continue;
    const auto st = static_cast<std::size_t>(a.stage);
    const StageBackwardMemory& sm = stage_memory[st];
    const Key key{a.stage, a.microbatch};
    std::int64_t output = 0;  // what the action leaves for a neighbour stage
    switch (a.kind) {
      case pipeline::ActionKind::kForward:
        take(forward_in, key);  // the input becomes the stash
        held += sm.forward_stash;
        if (targets_bytes > 0 && a.stage == 0 && targets_waiting.insert(a.microbatch).second) in_flight += targets_bytes;
        if (a.stage == last_stage && targets_waiting.erase(a.microbatch) > 0) in_flight -= targets_bytes;
        output = stage_out[st];
        break;
      case pipeline::ActionKind::kBackwardInput:
      case pipeline::ActionKind::kBackward: {
        const bool fused = a.kind == pipeline::ActionKind::kBackward;
        peak_stash = std::max(peak_stash, held + (fused ? sm.fused_peak : sm.input_peak) + in_flight + sending);
        take(backward_in, key);  // its dy, freed when the action ends
        held += fused ? -sm.forward_stash : sm.weight_stash - sm.forward_stash;
        output = stage_in[st];
        break;
      }
      case pipeline::ActionKind::kBackwardWeight:
        peak_stash = std::max(peak_stash, held + sm.weight_peak + in_flight + sending);
        held -= sm.weight_stash;
        break;
      default: break;
    }
    peak_stash = std::max(peak_stash, held + in_flight + sending + output);
    sending = 0;
    const bool sent = (a.kind == pipeline::ActionKind::kForward ? sends_forward : sends_backward).count(key) > 0;
    if (sent) sending = output;
    // An output no SEND carries goes to a stage of this rank: held until that stage consumes it.
    if (output > 0 && a.kind == pipeline::ActionKind::kForward && !sends_forward.count(key)) {
      forward_in[{a.stage + 1, a.microbatch}] = output;
      in_flight += output;
    }
    if (output > 0 && a.kind != pipeline::ActionKind::kForward && !sends_backward.count(key)) {
      backward_in[{a.stage - 1, a.microbatch}] = output;
      in_flight += output;
    }
  }
  MemoryPlan m;
  auto at = [&m](MemoryCategory c) -> std::int64_t& { return m.bytes[static_cast<std::size_t>(c)]; };
  // Without dp there is nothing to shard (zero_stage has no effect).
  const int zero_stage = dp > 1 ? config.optimizer.zero_stage : 0;
  // Deterministic mode sums micro-batch gradients in the canonical tree (pipeline/ordered_grad_accumulator.hpp):
  // up to floor(log2(micro-batches)) partial sums besides the gradient itself.
  int partial_sums = 0;
  if (config.train.deterministic) {
    for (int k = plan.schedule.num_microbatches; k > 1; k /= 2) ++partial_sums;
  }
  const double state = training_bytes_per_param_byte(config.optimizer) - 1.0;
  // optimizer.zero_reduce (ZeRO-2 and 3): per micro-batch, the shards plus the buckets alive (microbatch_peak).
  const bool per_microbatch = zero_stage >= 2 && config::resolved_zero_reduce(config) == config::ZeroReduce::kPerMicrobatch;
  if (zero_stage == 3) {
    // ZeRO-3 (engine/train/parameter_shards.hpp): each unit's f32 master shard (and bf16 working shard) stays;
    // a block's units are gathered in full in the compute dtype before its forward and its I (or B) and freed
    // after, the next block's in the same pass and stage prefetched meanwhile, so two adjacent blocks' units
    // are held at once (W gathers nothing). Gradients: the unit buckets in full until each is reduced (as
    // ZeRO-2), plus what the shards of the first reduced buckets add before their trades free more
    // (reduction_excess).
    // Expert parallelism: a moe block's E / ep experts are a unit of their own sharded over the dp × cp / ep ranks
    // of its expert-dp group (zero_three_units); the rest over dp × cp.
    const ZeroThreeUnits units = zero_three_units(plan, pp_rank, tp, dp, ep);
    const std::int64_t numel = units.total();
    at(MemoryCategory::kParameters) = units.shards() * (bf16 ? 6 : 4) + gathered_peak(units, plan, pp_rank) * (bf16 ? 2 : 4);
    const std::int64_t grad_bytes = 4 * numel;
    const bool staged = config.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16;
    if (per_microbatch) {
      const MicrobatchPeak mb = microbatch_peak(zero_three_buckets(units, plan.spec.blocks.size()), plan, pp_rank,
                                                dp, staged);
      // The expert units are reduced once per step: held in full through it, then traded for their shards.
      at(MemoryCategory::kGradients) = 4 * (mb.gradients + units.expert_total() + units.largest_expert_shard());
      if (staged) at(MemoryCategory::kCommunication) = 2 * std::max(mb.wire, units.expert_total());
    } else {
      // ep > 1: an expert unit may be traded before the others have freed anything (the two bucketers' trades
      // interleave as their collectives complete): the largest expert shard is the worst case's excess.
      at(MemoryCategory::kGradients) =
          grad_bytes + std::max(partial_sums * grad_bytes,
                                4 * std::max(reduction_excess(units, plan, pp_rank), units.largest_expert_shard()));
      if (staged) at(MemoryCategory::kCommunication) = 2 * numel;
    }
    m.gradients_between_steps = 0;
    at(MemoryCategory::kOptimizerState) = static_cast<std::int64_t>(state * static_cast<double>(4 * units.shards()));
  } else {
    // Expert parallelism: the rank holds E / ep of the experts (parameters, gradients, and without ZeRO their
    // optimizer state). ZeRO shards the experts over the dp x cp / ep ranks holding the same ones, so a rank's
    // share of the state, (E / ep) / (dp / ep), is what it was at ep 1: the sharded state below keeps param_bytes.
    // param_bytes, expert_bytes: one tp rank's (tp_rank_param_count: the replicated parameters whole).
    const std::int64_t sharded_bytes = param_bytes;
    param_bytes -= expert_bytes / ep * (ep - 1);
    // Mixed precision: bf16 working copies of the parameters besides the f32 masters.
    at(MemoryCategory::kParameters) = param_bytes + (bf16 ? param_bytes / 2 : 0);
    // ZeRO-2 (engine/train/data_parallel.hpp): a reduced bucket's block is copied into a shard buffer of its own
    // and the full bucket released; within the step the full local sum (and its partial sums, freed before the
    // buckets launch) still exists, so the peak is the full buckets plus the first reduced bucket's shard (at
    // most a bucket, parallel.dp_bucket_mb, ÷ dp); the shards are dropped after the update.
    const std::int64_t grad_bytes = param_bytes;
    const auto bucket_bytes = static_cast<std::int64_t>(config.parallel.dp_bucket_mb * 1024.0 * 1024.0);
    const std::int64_t first_shard = zero_stage >= 2 ? std::min(grad_bytes, bucket_bytes) / dp : 0;
    at(MemoryCategory::kGradients) = std::max((1 + partial_sums) * grad_bytes, grad_bytes + first_shard);
    // ep > 1 under ZeRO 0 and 1: the expert gradients live in the expert-dp group's bucket, the rest in the dp × cp
    // one (engine/train/data_parallel.hpp), grad_bytes in all (each parameter's own gradient is dropped before its
    // bucket is allocated; measured: ep_eight_ranks_test and ep_memory_plan_test, to the byte).
    // ZeRO-2 with ep, reduced per step: a bucket is traded for its shard when a later mark_ready or finish() finds
    // its collective done, so the expert-dp bucketer's first trade may come before any other bucket's has freed
    // memory: the plan takes that worst case, the full buckets plus the first expert shard (at most a bucket's, over
    // dp / ep). Measured (ep_memory_plan_test): that, or one expert shard less when the others traded first.
    if (ep > 1 && zero_stage >= 2) {
      const std::int64_t experts = expert_bytes / ep;
      at(MemoryCategory::kGradients) = std::max(at(MemoryCategory::kGradients),
                                                grad_bytes + std::min(experts, bucket_bytes) / (dp / ep));
    }
    m.gradients_between_steps = zero_stage >= 2 ? 0 : grad_bytes;
    at(MemoryCategory::kOptimizerState) = static_cast<std::int64_t>(
        zero_stage >= 1 ? state * static_cast<double>(sharded_bytes) / dp : state * static_cast<double>(param_bytes));
    // parallel.grad_reduce_dtype bf16: every gradient bucket has a bf16 twin the collective carries.
    const bool staged = dp > 1 && config.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16;
    if (staged) at(MemoryCategory::kCommunication) = param_bytes / 2;
    if (per_microbatch) {  // ZeRO-2 per micro-batch: the shards and at most two buckets (microbatch_peak)
      const MicrobatchPeak mb = microbatch_peak(
          zero_two_buckets(plan, pp_rank, tp, dp, config.parallel.dp_bucket_mb, ep), plan, pp_rank, dp, staged);
      at(MemoryCategory::kGradients) = 4 * mb.gradients;
      // ep > 1: the experts' buckets are reduced once per step over expert-dp: held in full through it, and the first
      // may be traded for its shard (a bucket's over dp / ep) while two micro-batch buckets are alive (when depends on
      // the collectives' timing: the plan takes the worst case; measured, ep_memory_plan_test: that, or one expert
      // shard less).
      if (ep > 1) {
        const std::int64_t experts = expert_bytes / ep;
        at(MemoryCategory::kGradients) += experts + std::min(experts, bucket_bytes) / (dp / ep);
      }
      if (staged) at(MemoryCategory::kCommunication) = 2 * mb.wire;
    }
  }
  // Mixed precision: bf16 activations and boundary tensors (statistics kept in f32 are a few bytes per row, not
  // counted). The boundary tensors in flight are in peak_stash (the walk above). History: a flat two receives and
  // the send just posted (ZB-V at pp2, d256 GPT: +2.4% / -1.2% measured; ZB-H2 and interleaved at micro-batch 16
  // +6.0..+7.1%; zb_h1 at tp2 x pp2 +1.1..7.8%). The walk, measured at zb_h1 tp2 x pp2
  // (SequenceParallel.SplitBackwardMemoryFollowsThePlan) and at ZB-H2, interleaved 1F1B, ZB-V and DualPipeV at pp2
  // and tp2 x pp2 with and without sequence parallelism (ScheduleMemory.EveryScheduleFollowsThePlan): every rank
  // within one boundary tensor of the measured activation peak, two on a loaded machine (a send completing later
  // than the test after the next compute action, or sooner).
  at(MemoryCategory::kActivations) = peak_stash * micro / (bf16 ? 2 : 1) / cp;
  // Workspace: the largest block output of a micro-batch (a transient output or gradient; the allocator's
  // workspace peak equalled it in the fp32 layouts measured before attention became memory-efficient), the CPU
  // attention kernel's scratch (which is the measured fp32 workspace now: 10,368 B per rank at one thread in
  // ScheduleMemory.EveryScheduleFollowsThePlan, +4..36 B), or CPU bf16's widened operands.
  at(MemoryCategory::kWorkspace) = std::max(largest_output * micro / cp, cpu_scratch / cp);
  // Context parallelism's K/V exchange buffers: one attention block's at a time, on top of the gradient
  // reduction's bf16 twins (which may be alive meanwhile: the persistent ones are). Measured against the allocator's
  // communication peak in ContextParallel.ActivationMemoryFollowsThePlan.
  m.cp_exchange = cp_exchange;
  at(MemoryCategory::kCommunication) += cp_exchange;
  return m;
}

std::string memory_plan_violation(const Plan& plan, const config::RunConfig& config, const CpuKernels& cpu) {
  const std::int64_t cap = config.device.memory_limit;
  if (cap <= 0) return {};
  for (int r = 0; r < plan.schedule.pp_size; ++r) {
    const MemoryPlan m = estimate_rank_memory(plan, config, r, cpu);
    if (m.total() <= cap) continue;
    const std::int64_t activations = m.bytes[static_cast<std::size_t>(MemoryCategory::kActivations)];
    // Recomputation is usually the cheapest fix when activations dominate: this plan's estimate under each
    // stronger mode, so the user sees whether one is enough before trying it.
    std::string recompute;
    const partition::Recompute current = config.train.recompute;
    for (const partition::Recompute mode : {partition::Recompute::kSelective, partition::Recompute::kFull}) {
      if (current == partition::Recompute::kFull || current == mode) continue;
      config::RunConfig stronger = config;
      stronger.train.recompute = mode;
      const MemoryPlan with = estimate_rank_memory(plan, stronger, r, cpu);
      recompute += fmt::format(", train.recompute={} needs about {} (activations {}{})", mode,
                               format_bytes(with.total()),
                               format_bytes(with.bytes[static_cast<std::size_t>(MemoryCategory::kActivations)]),
                               with.total() <= cap ? ", fits" : "");
    }
    // With data parallelism, the same for each higher ZeRO stage (3 shards the parameters too).
    std::string zero;
    if (config.parallel.data_parallel_size > 1) {
      for (int stage = config.optimizer.zero_stage + 1; stage <= 3; ++stage) {
        config::RunConfig sharded = config;
        sharded.optimizer.zero_stage = stage;
        const MemoryPlan with = estimate_rank_memory(plan, sharded, r, cpu);
        zero += fmt::format(", optimizer.zero_stage={} needs about {}{}", stage, format_bytes(with.total()),
                            with.total() <= cap ? " (fits)" : "");
      }
    }
    // A model with attention can also split every sequence (activations divide by cp).
    const std::string sequence =
        partition::has_attention(plan.spec)
            ? fmt::format(", split every sequence over more ranks (parallel.context_parallel_size, now {}: "
                          "activations divide by it)",
                          config.parallel.context_parallel_size)
            : std::string();
    return fmt::format(
        "memory: pp rank {} needs about {} ({}) but device.memory_limit is {}; activations are {} ({:.0f}%){}{}. "
        "Otherwise split the model over more ranks (parallel.pipeline_model_parallel_size / "
        "tensor_model_parallel_size){}, use optimizer.zero_stage 1, 2 or 3 with data parallelism (3 shards the "
        "parameters too), or lower batch.micro_batch_size; `cleave plan CONFIG --world N` searches layouts, "
        "schedules, ZeRO stages and recompute modes under this cap",
        r, format_bytes(m.total()), m.breakdown(), format_bytes(cap), format_bytes(activations),
        100.0 * static_cast<double>(activations) / static_cast<double>(m.total()), recompute, zero, sequence);
  }
  return {};
}

}  // namespace cleave::run_plan
