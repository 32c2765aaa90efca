// See state_memory.hpp.
#include "engine/run_plan/state_memory.hpp"

#include <algorithm>

#include "engine/run_plan/flat_buckets.hpp"
#include "engine/run_plan/microbatch_buckets.hpp"
#include "engine/run_plan/zero_units.hpp"

namespace cleave::run_plan {

namespace {

// What every ZeRO stage's model reads of the run.
struct StateShape {
  int tp = 1;
  int dp = 1;  // gradients and shards spread over dp × cp ranks
  int ep = 1;
  bool bf16 = false;
  int zero_stage = 0;    // 0 without dp: there is nothing to shard (zero_stage has no effect)
  int partial_sums = 0;  // deterministic mode's partial sums besides the gradient itself
  double state = 0;      // optimizer state bytes per f32 parameter byte
  bool per_microbatch = false;  // ZeRO-2 and 3 reduce per micro-batch (optimizer.zero_reduce)
};

StateShape state_shape(const Plan& plan, const config::RunConfig& config) {
  StateShape s;
  s.tp = config.parallel.tensor_model_parallel_size;
  const int cp = std::max(1, config.parallel.context_parallel_size);
  s.dp = std::max(1, config.parallel.data_parallel_size) * cp;
  s.ep = std::max(1, config.parallel.expert_model_parallel_size);
  s.bf16 = config.device.precision == config::Precision::kBf16;
  s.zero_stage = s.dp > 1 ? config.optimizer.zero_stage : 0;
  // Deterministic mode sums micro-batch gradients in the canonical tree (pipeline/ordered_grad_accumulator.hpp):
  // up to floor(log2(micro-batches)) partial sums besides the gradient itself.
  if (config.train.deterministic) {
    for (int k = plan.schedule.num_microbatches; k > 1; k /= 2) ++s.partial_sums;
  }
  s.state = training_bytes_per_param_byte(config.optimizer) - 1.0;
  // optimizer.zero_reduce (ZeRO-2 and 3): per micro-batch, the shards plus the buckets alive (microbatch_peak).
  s.per_microbatch =
      s.zero_stage >= 2 && config::resolved_zero_reduce(config) == config::ZeroReduce::kPerMicrobatch;
  return s;
}

std::int64_t& category_bytes(MemoryPlan& m, MemoryCategory c) { return m.bytes[static_cast<std::size_t>(c)]; }

// ZeRO-3 (engine/train/parameter_shards.hpp): each unit's f32 master shard (and bf16 working shard) stays;
// a block's units are gathered in full in the compute dtype before its forward and its I (or B) and freed
// after, the next block's in the same pass and stage prefetched meanwhile, so two adjacent blocks' units
// are held at once (W gathers nothing). Gradients: the unit buckets in full until each is reduced (as
// ZeRO-2), plus what the shards of the first reduced buckets add before their trades free more
// (reduction_excess).
// Expert parallelism: a moe block's E / ep experts are a unit of their own sharded over the dp × cp / ep ranks
// of its expert-dp group (zero_three_units); the rest over dp × cp.
void set_zero_three_state(MemoryPlan& m, const Plan& plan, const config::RunConfig& config, int pp_rank,
                          const StateShape& s) {
  const ZeroThreeUnits units = zero_three_units(plan, pp_rank, s.tp, s.dp, s.ep);
  const std::int64_t numel = units.total();
  category_bytes(m, MemoryCategory::kParameters) =
      units.shards() * (s.bf16 ? 6 : 4) + gathered_peak(units, plan, pp_rank) * (s.bf16 ? 2 : 4);
  const std::int64_t grad_bytes = 4 * numel;
  const bool staged = config.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16;
  if (s.per_microbatch) {
    const MicrobatchPeak mb = microbatch_peak(zero_three_buckets(units, plan.spec.blocks.size()), plan, pp_rank,
                                              s.dp, staged);
    // The expert units are reduced once per step: held in full through it, then traded for their shards.
    category_bytes(m, MemoryCategory::kGradients) =
        4 * (mb.gradients + units.expert_total() + units.largest_expert_shard());
    if (staged) category_bytes(m, MemoryCategory::kCommunication) = 2 * std::max(mb.wire, units.expert_total());
  } else {
    // ep > 1: an expert unit may be traded before the others have freed anything (the two bucketers' trades
    // interleave as their collectives complete): the largest expert shard is the worst case's excess.
    category_bytes(m, MemoryCategory::kGradients) =
        grad_bytes + std::max(s.partial_sums * grad_bytes,
                              4 * std::max(reduction_excess(units, plan, pp_rank), units.largest_expert_shard()));
    if (staged) category_bytes(m, MemoryCategory::kCommunication) = 2 * numel;
  }
  m.gradients_between_steps = 0;
  category_bytes(m, MemoryCategory::kOptimizerState) =
      static_cast<std::int64_t>(s.state * static_cast<double>(4 * units.shards()));
}

// ZeRO-2 per micro-batch: the shards and at most two buckets (microbatch_peak), over what set_flat_state set.
void set_zero_two_per_microbatch_state(MemoryPlan& m, const Plan& plan, const config::RunConfig& config, int pp_rank,
                                       const StateShape& s, const FlatBuckets& flat, std::int64_t param_bytes,
                                       std::int64_t expert_bytes, bool staged) {
  const int dp = s.dp, ep = s.ep;
  const MicrobatchBuckets buckets = zero_two_buckets(plan, pp_rank, s.tp, dp, config.parallel.dp_bucket_mb, ep);
  const MicrobatchPeak mb = microbatch_peak(buckets, plan, pp_rank, dp, staged);
  // The flat values follow these buckets (whole blocks packed; a split table's and the experts' per step).
  const std::int64_t values = buckets.shards() + buckets.per_step + flat.expert_total;
  category_bytes(m, MemoryCategory::kParameters) = 4 * values + (s.bf16 ? param_bytes / 2 : 0);
  category_bytes(m, MemoryCategory::kOptimizerState) = static_cast<std::int64_t>(
      s.state * static_cast<double>(4 * ((buckets.shards() + buckets.per_step) / dp + flat.expert_shard)));
  category_bytes(m, MemoryCategory::kGradients) = 4 * mb.gradients;
  // ep > 1: the experts' buckets are reduced once per step over expert-dp: held in full through it, and the first
  // may be traded for its shard (a bucket's over dp / ep) while two micro-batch buckets are alive (when depends on
  // the collectives' timing: the plan takes the worst case; measured, ep_memory_plan_test: that, or one expert
  // shard less).
  if (ep > 1) {
    const std::int64_t experts = expert_bytes / ep;
    const auto bucket_bytes = static_cast<std::int64_t>(config.parallel.dp_bucket_mb * 1024.0 * 1024.0);
    category_bytes(m, MemoryCategory::kGradients) += experts + std::min(experts, bucket_bytes) / (dp / ep);
  }
  if (staged) category_bytes(m, MemoryCategory::kCommunication) = 2 * mb.wire;
}

// ZeRO 0, 1 and 2: the parameters replicated (ZeRO 0) or their f32 values in flat buffers (1 and 2).
// Expert parallelism: the rank holds E / ep of the experts (parameters, gradients, and without ZeRO their
// optimizer state). ZeRO shards the experts over the dp x cp / ep ranks holding the same ones (their own
// bucketer, flat_buckets), so a rank's share of the state, (E / ep) / (dp / ep), is what it was at ep 1.
// param_bytes, expert_bytes: one tp rank's (tp_rank_param_count: the replicated parameters whole).
void set_flat_state(MemoryPlan& m, const Plan& plan, const config::RunConfig& config, int pp_rank,
                    const StateShape& s, std::int64_t param_bytes, std::int64_t expert_bytes) {
  const int dp = s.dp, ep = s.ep, zero_stage = s.zero_stage;
  param_bytes -= expert_bytes / ep * (ep - 1);
  // With dp, the gradients live in the bucketers' buckets, and ZeRO-1 and 2 keep the f32 values in flat buffers
  // laid out like them (its shards the optimizer's): each tensor from a 64-byte boundary, each bucket padded to a
  // multiple of its group (flat_buckets.hpp). Without dp each parameter and gradient is a tensor of its own.
  // The partial sums of deterministic mode are tensors of their own (pipeline/ordered_grad_accumulator.cpp).
  const FlatBuckets flat = dp > 1 ? flat_buckets(plan, pp_rank, s.tp, dp, ep, config.parallel.dp_bucket_mb,
                                                 zero_stage >= 1)
                                  : FlatBuckets{param_bytes / 4, param_bytes / 4};
  // Mixed precision: bf16 working copies of the parameters besides the f32 masters.
  category_bytes(m, MemoryCategory::kParameters) =
      (zero_stage >= 1 ? 4 * flat.total : param_bytes) + (s.bf16 ? param_bytes / 2 : 0);
  // ZeRO-2 (engine/train/data_parallel.hpp): a reduced bucket's block is copied into a shard buffer of its own
  // and the full bucket released, bucket after bucket in order; within the step the full local sum (and its
  // partial sums, freed before the buckets launch) still exists, so the peak is the full buckets plus what the
  // trades add (FlatBuckets::trade_excess: the first bucket's shard, or a later one's less what the buckets
  // before it freed; with a split tied table or at ep > 1, whose bucketers trade in an order timing decides, the
  // worst order). Under a bf16 wire (staged) a bucket's f32 buffer is freed at its launch and its shard allocated
  // in finish(): nothing is added. The shards are dropped after the update.
  // ep > 1 under ZeRO 0 and 1: the expert gradients live in the expert-dp group's bucket, the rest in the dp × cp
  // one (engine/train/data_parallel.hpp), grad_bytes in all (each parameter's own gradient is dropped before its
  // bucket is allocated; measured: ep_eight_ranks_test and ep_memory_plan_test, to the byte).
  const bool staged = dp > 1 && config.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16;
  const std::int64_t grad_bytes = 4 * flat.total;
  const std::int64_t trades = zero_stage >= 2 && !staged ? 4 * flat.trade_excess : 0;
  category_bytes(m, MemoryCategory::kGradients) = grad_bytes + std::max(s.partial_sums * param_bytes, trades);
  m.gradients_between_steps = zero_stage >= 2 ? 0 : grad_bytes;
  category_bytes(m, MemoryCategory::kOptimizerState) = static_cast<std::int64_t>(
      zero_stage >= 1 ? s.state * static_cast<double>(4 * flat.shard) : s.state * static_cast<double>(param_bytes));
  // parallel.grad_reduce_dtype bf16: every gradient bucket has a bf16 twin the collective carries.
  if (staged) category_bytes(m, MemoryCategory::kCommunication) = 2 * flat.total;
  if (s.per_microbatch) {
    set_zero_two_per_microbatch_state(m, plan, config, pp_rank, s, flat, param_bytes, expert_bytes, staged);
  }
}

}  // namespace

void set_state_memory(MemoryPlan& m, const Plan& plan, const config::RunConfig& config, int pp_rank,
                      std::int64_t param_bytes, std::int64_t expert_bytes) {
  const StateShape s = state_shape(plan, config);
  if (s.zero_stage == 3) {
    set_zero_three_state(m, plan, config, pp_rank, s);
  } else {
    set_flat_state(m, plan, config, pp_rank, s, param_bytes, expert_bytes);
  }
}

}  // namespace cleave::run_plan
