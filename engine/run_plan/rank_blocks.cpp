// See rank_blocks.hpp.
#include "engine/run_plan/rank_blocks.hpp"

#include <algorithm>
#include <utility>

#include "engine/run_plan/cp_memory.hpp"
#include "engine/run_plan/param_counts.hpp"
#include "engine/run_plan/workspace_memory.hpp"
#include "partition/block_work.hpp"
#include "partition/ep_costs.hpp"

namespace cleave::run_plan {
namespace {

// A probabilities attention kind's stored tensors (estimate_rank_memory's `attention`, memory_plan.hpp) per sample of one tp rank, in the walk's
// units (the f32 cost's: twice the bytes under bf16, which the walk halves; the dropout mask's byte too).
std::int64_t stored_probabilities_bytes(const partition::BlockSpec& block, partition::AttentionKind attention,
                                        partition::Recompute recompute, int tp, bool bf16) {
  if (recompute != partition::Recompute::kNone) return 0;
  const double saved =
      partition::attention_probabilities_work(block, bf16 ? DType::kBF16 : DType::kF32, attention, tp, 1).saved_bytes;
  return static_cast<std::int64_t>(saved) * (bf16 ? 2 : 1);
}

// With tied embeddings the token table appears in the embedding's and the head's cost; a rank holding both (ZB-V)
// shares one Param, so the second occurrence adds only what is not the table. One tp rank's f32 bytes of it (0
// untied).
std::int64_t tied_table_bytes(const partition::ModelSpec& spec, int tp) {
  if (spec.tied_parameters.empty()) return 0;
  return (spec.token_sizes().vocab_size + tp - 1) / tp * spec.token_sizes().d_model * 4;
}

}  // namespace

partition::EpMemoryImbalance ep_memory_figures(const partition::ModelSpec& spec, const config::RunConfig& config,
                                               partition::EpMemoryImbalance given) {
  const int ep = std::max(1, config.parallel.expert_model_parallel_size);
  if (ep == 1) return {1.0};
  const partition::EpMemoryImbalance figures{given.stash > 0 ? given.stash : config.parallel.ep_stash_imbalance,
                                             given.peak > 0 ? given.peak : config.parallel.ep_peak_imbalance};
  return figures.or_bound(partition::workload_ep_row_bound(spec, ep));
}

RankShape rank_shape(const Plan& plan, const config::RunConfig& config, const CpuKernels& cpu,
                     partition::EpMemoryImbalance ep_imbalance,
                     partition::AttentionKind attention) {
  RankShape s;
  s.tp = config.parallel.tensor_model_parallel_size;
  s.recompute = config.train.recompute;
  s.sp = config.parallel.sequence_parallel && s.tp > 1;
  s.bf16 = config.device.precision == config::Precision::kBf16;
  s.micro = config.resolved_batch().micro_batch_size;
  s.cp = std::max(1, config.parallel.context_parallel_size);
  s.ring = s.cp > 1 && config.parallel.context_parallel_comm == config::ContextParallelComm::kRing;
  s.ep = std::max(1, config.parallel.expert_model_parallel_size);
  // Not the time model's figure (uniformly random routing, partition::workload_ep_imbalance): a memory plan under
  // the peak says "fits" for a run that fails, so what is not given is the bound no routing exceeds.
  // A figure not given here (0) is the config's (parallel.ep_stash_imbalance, ep_peak_imbalance: the trainer's
  // own plan), and where that is 0 too, the bound.
  s.imbalance = ep_memory_figures(plan.spec, config, ep_imbalance);
  s.on_cpu = config.device.type == DeviceType::kCpu;
  s.widens = s.bf16 && s.on_cpu && !cpu.bf16_gemm.bf16_kernels;
  s.attention = attention;
  return s;
}

ModelCostTables model_cost_tables(const partition::ModelSpec& spec, const RankShape& s) {
  ModelCostTables t;
  t.whole = partition::model_costs(spec, DType::kF32, s.recompute);
  t.shard = partition::model_costs(spec, DType::kF32, s.recompute, s.tp, s.sp);
  t.shard16 = s.bf16 ? partition::model_costs(spec, DType::kBF16, s.recompute, s.tp, s.sp) : t.shard;
  return t;
}

partition::BlockCost rank_block_cost(const partition::BlockSpec& block, std::size_t b, const ModelCostTables& t,
                                     const RankShape& s) {
  partition::BlockCost a = t.shard[b];
  if (s.cp > 1) {
    add_cp_attention_state(a, block, s.recompute, s.tp, s.cp, s.ring, s.sp, s.bf16 ? &t.shard16[b] : nullptr);
  }
  if (s.ep > 1) partition::add_ep_expert_rows(a, block, DType::kF32, s.recompute, s.tp, s.imbalance, s.sp);
  a.activation_bytes += stored_probabilities_bytes(block, s.attention, s.recompute, s.tp, s.bf16);  // held from F to I
  // bf16: the walk halves its bytes, but the f32 statistics and i32 ids and targets the cost model counts apart
  // (its fixed bytes: the bf16 cost less half the f32 one) stay whole: counted twice here. Before, halved with
  // the rest: the loss's targets 2 B per token under, each norm's and the attention's statistics likewise (ZB-V
  // bf16 at pp2: activations -1.30% / -1.26% under the measured peak, ScheduleMemory).
  if (s.bf16) {
    const partition::BlockCost& half = t.shard16[b];
    const partition::BlockCost& whole = t.shard[b];
    a.activation_bytes += 2 * half.activation_bytes - whole.activation_bytes;
    a.weight_stash_bytes += 2 * half.weight_stash_bytes - whole.weight_stash_bytes;
    a.backward_extra_bytes += 2 * half.backward_extra_bytes - whole.backward_extra_bytes;
    a.weight_extra_bytes += 2 * half.weight_extra_bytes - whole.weight_extra_bytes;
  }
  add_cp_whole_stash(a, block, s.recompute, s.cp, s.bf16);  // after the bf16 fix-up: counted in its own units
  return a;
}

RankBlocks gather_rank_blocks(const Plan& plan, int pp_rank, const ModelCostTables& t, const RankShape& s,
                              const CpuKernels& cpu) {
  RankBlocks r;
  const auto stages = static_cast<std::size_t>(plan.num_stages());
  r.stage_blocks.resize(stages);
  r.stage_transients.resize(stages);
  r.stage_in.assign(stages, 0);
  r.stage_out = r.stage_in;
  const bool tied = !plan.spec.tied_parameters.empty();
  const std::int64_t table_bytes = tied_table_bytes(plan.spec, s.tp);
  bool table_seen = false;
  for (int stage = 0; stage < plan.num_stages(); ++stage) {
    if (plan.stage_to_rank(stage) != pp_rank) continue;
    const auto st = static_cast<std::size_t>(stage);
    const auto& range = plan.partition.stages[st];
    for (int b = range.begin; b < range.end; ++b) {
      const auto bi = static_cast<std::size_t>(b);
      const auto& block = plan.spec.blocks[bi];
      const bool holds_table = tied && (block.kind == partition::BlockKind::kEmbedding ||
                                        block.kind == partition::BlockKind::kLmHead);
      const std::int64_t rank_bytes = 4 * tp_rank_param_count(block, t.whole[bi], s.tp);
      r.param_bytes += holds_table && table_seen ? rank_bytes - table_bytes : rank_bytes;
      table_seen = table_seen || holds_table;
      r.expert_bytes += 4 * partition::expert_param_count(block) / s.tp;
      r.cp_exchange = std::max(r.cp_exchange, cp_exchange_bytes(block, s.micro, s.tp, s.cp, s.ring, s.bf16 ? 2 : 4));
      // The attention kernel's scratch is known with the run's CPU kernels only (threads).
      BlockTransients transients =
          attention_transients(block, s.micro, s.tp, s.cp, s.ring, s.bf16, s.on_cpu ? cpu.threads : 0);
      const partition::BlockCost a = rank_block_cost(block, bi, t, s);
      if (s.cp <= 1 && s.recompute == partition::Recompute::kNone) {
        place_attention_scratch_at_core_level(transients, a, block, s.tp, s.sp, s.bf16);
      }
      // A moe block's routing weights' gradient (MoeMlp::backward_input's dweight, f32 [n, k] workspace, n its micro
      // · T / cp rows): alive through the experts' and the combine's phases of its backward, so at the block's
      // backward peak when that is the mixture's (at least the peak otherwise: the safe side). Before it was counted
      // the total was 1,024 B under the measured peak at ep 2 and 4 (MemoryPlanTotal.ExpertParallelWithinTwoPercent)
      // once the attention scratch no longer stood at that peak.
      if (block.n_experts > 0 && block.top_k > 0) {
        const std::int64_t dweight = s.micro * (block.seq_len / s.cp) * block.top_k * 4;
        transients.backward.push_back({0, dweight});
        r.block_scratch = std::max(r.block_scratch, dweight);
      }
      r.stage_transients[st].push_back(std::move(transients));
      r.stage_blocks[st].push_back(a);
      r.largest_output = std::max(r.largest_output, a.output_bytes);
      // On the CPU only a convolution's im2col scales with its output (the stand-in below); the other blocks' ops
      // take no output-sized scratch.
      if (block.kind == partition::BlockKind::kConv2d) {
        r.largest_conv_output = std::max(r.largest_conv_output, a.output_bytes);
      }
      r.block_scratch = std::max(
          r.block_scratch, cpu_cp_attention_scratch_bytes(block, s.micro, s.tp, s.cp, s.ring, cpu.threads, s.bf16));
      if (s.widens) {
        r.cpu_scratch = std::max(r.cpu_scratch, cpu_bf16_widening_bytes(block, a, s.recompute, s.tp, s.micro));
      }
    }
    // Boundary tensors: what the stage receives (the previous block's output) and what it sends (its own).
    // Under sequence parallelism they are one tp rank's sequence shards.
    const auto& sent = s.sp ? t.shard : t.whole;
    if (stage > 0) r.stage_in[st] = sent[static_cast<std::size_t>(range.begin - 1)].output_bytes;
    if (stage + 1 < plan.num_stages()) r.stage_out[st] = sent[static_cast<std::size_t>(range.end - 1)].output_bytes;
  }
  return r;
}

}  // namespace cleave::run_plan
