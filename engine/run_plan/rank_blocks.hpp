// One pp rank's blocks as the memory plan reads them (memory_plan.cpp combines them into categories): the run's shape
// (RankShape), each block's activation cost per sample with cp, ep, the stored attention probabilities and the bf16
// fix-up applied (rank_block_cost), and what the rank's stages hold (gather_rank_blocks). Invariant: activation and
// boundary bytes are per sample, one tp rank's, whole-sequence f32 (the cost model's units, as activation_walk.hpp
// reads them); the caller scales them by the micro-batch, the compute dtype and cp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/run_plan/memory_plan.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "partition/ep_costs.hpp"

namespace cleave::run_plan {

// The run's parallel layout, precision and kernels, as the per-block costs of one tp rank read them.
struct RankShape {
  int tp = 1;
  bool sp = false;    // sequence parallelism: the residual stream split along the sequence (tp > 1 only)
  bool bf16 = false;  // device.precision bf16
  partition::Recompute recompute = partition::Recompute::kNone;
  std::int64_t micro = 1;  // samples per micro-batch
  // Context parallelism: every activation holds T / cp tokens of each sample (the attention state too: all_to_all
  // keeps heads / cp of the whole sequence), and gradients and ZeRO shards spread over dp × cp ranks (state_memory).
  int cp = 1;
  bool ring = false;  // cp's exchange is the ring (else all_to_all)
  // Expert parallelism (partition/ep_costs.hpp): a rank holds E / ep of each moe block's experts and runs the rows
  // its experts receive, at most imbalance.stash x the mean summed over the blocks it stashes and imbalance.peak x
  // the mean in any one block (both 1 at ep 1; never 0: resolved to the dropless bound where not given).
  int ep = 1;
  partition::EpMemoryImbalance imbalance{1.0};
  bool on_cpu = false;
  bool widens = false;  // CPU bf16 operands widened to f32 (see cpu_bf16_widening_bytes)
  partition::AttentionKind attention = partition::AttentionKind::kMemoryEfficient;
};

// ep_imbalance and attention: as estimate_rank_memory's (memory_plan.hpp).
RankShape rank_shape(const Plan& plan, const config::RunConfig& config, const CpuKernels& cpu,
                     partition::EpMemoryImbalance ep_imbalance,
                     partition::AttentionKind attention);

// The cost model's per-block costs per sample: whole-model (parameters, ÷ tp later), one tp rank's (activations:
// the cost model's tp layout) and, under bf16, one tp rank's in bf16 (else a copy of `shard`).
struct ModelCostTables {
  std::vector<partition::BlockCost> whole, shard, shard16;
};

ModelCostTables model_cost_tables(const partition::ModelSpec& spec, const RankShape& s);

// Block `b`'s activation cost per sample on one tp rank, in the walk's units: the shard's, with cp's attention state,
// ep's expert rows, a probabilities kind's stored tensors and the bf16 fix-up of what stays whole.
partition::BlockCost rank_block_cost(const partition::BlockSpec& block, std::size_t b, const ModelCostTables& t,
                                     const RankShape& s);

// What one pp rank's blocks hold, gathered stage by stage in model order.
struct RankBlocks {
  std::int64_t param_bytes = 0;  // f32 bytes of the parameters one tp rank of this pp rank holds (all E experts)
  std::int64_t expert_bytes = 0;  // f32 bytes of the routed experts of the rank's blocks (all E of each), ÷ tp
  std::int64_t largest_output = 0;
  std::int64_t largest_conv_output = 0;  // the CPU's stand-in for a convolution's im2col scratch
  // The workspace a block holds only while it runs (its BlockTransients), the largest: the CPU attention kernel's
  // scratch, cp-aware (cpu_cp_attention_scratch_bytes), or a moe block's routing weights' gradient ([n, k] f32).
  std::int64_t block_scratch = 0;
  std::int64_t cpu_scratch = 0;  // the CPU kernels' scratch for bf16 operands widened (whole sequences)
  std::int64_t cp_exchange = 0;  // the largest cp exchange of the rank's attention blocks (one runs at a time)
  // Per stage held by this rank, per sample: its blocks' costs in model order (one tp rank's).
  std::vector<std::vector<partition::BlockCost>> stage_blocks;
  // Per stage, per block: the buffers it holds only while it runs (cp_memory.hpp's attention_transients).
  std::vector<std::vector<BlockTransients>> stage_transients;
  // Per stage held by this rank, per sample: its input and output boundary tensors (0 at the model's ends).
  std::vector<std::int64_t> stage_in, stage_out;
};

// The blocks of every stage `pp_rank` holds, in model order, and its stages' boundary tensors.
RankBlocks gather_rank_blocks(const Plan& plan, int pp_rank, const ModelCostTables& t, const RankShape& s,
                              const CpuKernels& cpu);

}  // namespace cleave::run_plan
