// See state_memory.hpp.
#include "engine/run_plan/state_memory.hpp"

#include <algorithm>

#include "engine/run_plan/flat_buckets.hpp"
#include "engine/run_plan/microbatch_buckets.hpp"
#include "engine/run_plan/zero_units.hpp"

namespace cleave::run_plan {

void set_state_memory(MemoryPlan& m, const Plan& plan, const config::RunConfig& config, int pp_rank,
                      std::int64_t param_bytes, std::int64_t expert_bytes) {
  const int tp = config.parallel.tensor_model_parallel_size;
  const int cp = std::max(1, config.parallel.context_parallel_size);
  const int dp = std::max(1, config.parallel.data_parallel_size) * cp;  // gradients and shards over dp × cp
  const int ep = std::max(1, config.parallel.expert_model_parallel_size);
  const bool bf16 = config.device.precision == config::Precision::kBf16;
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
    // optimizer state). ZeRO shards the experts over the dp x cp / ep ranks holding the same ones (their own
    // bucketer, flat_buckets), so a rank's share of the state, (E / ep) / (dp / ep), is what it was at ep 1.
    // param_bytes, expert_bytes: one tp rank's (tp_rank_param_count: the replicated parameters whole).
    param_bytes -= expert_bytes / ep * (ep - 1);
    // With dp, the gradients live in the bucketers' buckets, and ZeRO-1 and 2 keep the f32 values in flat buffers
    // laid out like them (its shards the optimizer's): each tensor from a 64-byte boundary, each bucket padded to a
    // multiple of its group (flat_buckets.hpp). Without dp each parameter and gradient is a tensor of its own.
    // The partial sums of deterministic mode are tensors of their own (pipeline/ordered_grad_accumulator.cpp).
    const FlatBuckets flat = dp > 1 ? flat_buckets(plan, pp_rank, tp, dp, ep, config.parallel.dp_bucket_mb,
                                                   zero_stage >= 1)
                                    : FlatBuckets{param_bytes / 4, param_bytes / 4};
    // Mixed precision: bf16 working copies of the parameters besides the f32 masters.
    at(MemoryCategory::kParameters) = (zero_stage >= 1 ? 4 * flat.total : param_bytes) + (bf16 ? param_bytes / 2 : 0);
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
    at(MemoryCategory::kGradients) = grad_bytes + std::max(partial_sums * param_bytes, trades);
    m.gradients_between_steps = zero_stage >= 2 ? 0 : grad_bytes;
    at(MemoryCategory::kOptimizerState) = static_cast<std::int64_t>(
        zero_stage >= 1 ? state * static_cast<double>(4 * flat.shard) : state * static_cast<double>(param_bytes));
    // parallel.grad_reduce_dtype bf16: every gradient bucket has a bf16 twin the collective carries.
    if (staged) at(MemoryCategory::kCommunication) = 2 * flat.total;
    if (per_microbatch) {  // ZeRO-2 per micro-batch: the shards and at most two buckets (microbatch_peak)
      const MicrobatchBuckets buckets = zero_two_buckets(plan, pp_rank, tp, dp, config.parallel.dp_bucket_mb, ep);
      const MicrobatchPeak mb = microbatch_peak(buckets, plan, pp_rank, dp, staged);
      // The flat values follow these buckets (whole blocks packed; a split table's and the experts' per step).
      const std::int64_t values = buckets.shards() + buckets.per_step + flat.expert_total;
      at(MemoryCategory::kParameters) = 4 * values + (bf16 ? param_bytes / 2 : 0);
      at(MemoryCategory::kOptimizerState) = static_cast<std::int64_t>(
          state * static_cast<double>(4 * ((buckets.shards() + buckets.per_step) / dp + flat.expert_shard)));
      at(MemoryCategory::kGradients) = 4 * mb.gradients;
      // ep > 1: the experts' buckets are reduced once per step over expert-dp: held in full through it, and the first
      // may be traded for its shard (a bucket's over dp / ep) while two micro-batch buckets are alive (when depends on
      // the collectives' timing: the plan takes the worst case; measured, ep_memory_plan_test: that, or one expert
      // shard less).
      if (ep > 1) {
        const std::int64_t experts = expert_bytes / ep;
        const auto bucket_bytes = static_cast<std::int64_t>(config.parallel.dp_bucket_mb * 1024.0 * 1024.0);
        at(MemoryCategory::kGradients) += experts + std::min(experts, bucket_bytes) / (dp / ep);
      }
      if (staged) at(MemoryCategory::kCommunication) = 2 * mb.wire;
    }
  }
}

}  // namespace cleave::run_plan
