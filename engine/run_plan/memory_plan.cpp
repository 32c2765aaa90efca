// See memory_plan.hpp. This file gathers one pp rank's blocks and combines the categories; each category's model
// lives in its own file: param_counts (one tp rank's parameters), state_memory with zero_units and
// microbatch_buckets (parameters, gradients, optimizer state under ZeRO), activation_walk (the stashes and boundary
// tensors over the schedule), cp_memory (context parallelism's attention state and exchange buffers) and
// workspace_memory (the CPU kernels' scratch).
#include "engine/run_plan/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/run_plan/activation_walk.hpp"
#include "engine/run_plan/cp_memory.hpp"
#include "engine/run_plan/host_memory.hpp"
#include "engine/run_plan/param_counts.hpp"
#include "engine/run_plan/state_memory.hpp"
#include "engine/run_plan/workspace_memory.hpp"
#include "partition/cost_model.hpp"
#include "partition/cp_rules.hpp"
#include "partition/ep_costs.hpp"

namespace cleave::run_plan {
namespace {

// A probabilities attention kind's stored tensors (the header's `attention`) per sample of one tp rank, in the walk's
// units (the f32 cost's: twice the bytes under bf16, which the walk halves; the dropout mask's byte too).
std::int64_t stored_probabilities_bytes(const partition::BlockSpec& block, partition::AttentionKind attention,
                                        partition::Recompute recompute, int tp, bool bf16) {
  if (recompute != partition::Recompute::kNone) return 0;
  const double saved =
      partition::attention_probabilities_work(block, bf16 ? DType::kBF16 : DType::kF32, attention, tp, 1).saved_bytes;
  return static_cast<std::int64_t>(saved) * (bf16 ? 2 : 1);
}

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
  // its experts receive, imbalance x the mean on the busiest rank.
  int ep = 1;
  double imbalance = 1.0;
  bool on_cpu = false;
  bool widens = false;  // CPU bf16 operands widened to f32 (see cpu_bf16_widening_bytes)
  partition::AttentionKind attention = partition::AttentionKind::kMemoryEfficient;
};

RankShape rank_shape(const Plan& plan, const config::RunConfig& config, const CpuKernels& cpu, double ep_imbalance,
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
  s.imbalance = s.ep == 1          ? 1.0
                : ep_imbalance > 0 ? ep_imbalance
                                   : partition::workload_ep_imbalance(plan.spec, s.micro, s.cp, s.ep);
  s.on_cpu = config.device.type == DeviceType::kCpu;
  s.widens = s.bf16 && s.on_cpu && !cpu.bf16_gemm.bf16_kernels;
  s.attention = attention;
  return s;
}

// The cost model's per-block costs per sample: whole-model (parameters, ÷ tp later), one tp rank's (activations:
// the cost model's tp layout) and, under bf16, one tp rank's in bf16 (else a copy of `shard`).
struct ModelCostTables {
  std::vector<partition::BlockCost> whole, shard, shard16;
};

ModelCostTables model_cost_tables(const partition::ModelSpec& spec, const RankShape& s) {
  ModelCostTables t;
  t.whole = partition::model_costs(spec, DType::kF32, s.recompute);
  t.shard = partition::model_costs(spec, DType::kF32, s.recompute, s.tp, s.sp);
  t.shard16 = s.bf16 ? partition::model_costs(spec, DType::kBF16, s.recompute, s.tp, s.sp) : t.shard;
  return t;
}

// Block `b`'s activation cost per sample on one tp rank, in the walk's units: the shard's, with cp's attention state,
// ep's expert rows, a probabilities kind's stored tensors and the bf16 fix-up of what stays whole.
partition::BlockCost rank_block_cost(const partition::BlockSpec& block, std::size_t b, const ModelCostTables& t,
                                     const RankShape& s) {
  partition::BlockCost a = t.shard[b];
  if (s.cp > 1) add_cp_attention_state(a, block, s.recompute, s.tp, s.cp, s.ring, s.sp, s.bf16 ? &t.shard16[b] : nullptr);
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

// What one pp rank's blocks hold, gathered stage by stage in model order.
struct RankBlocks {
  std::int64_t param_bytes = 0;  // f32 bytes of the parameters one tp rank of this pp rank holds (all E experts)
  std::int64_t expert_bytes = 0;  // f32 bytes of the routed experts of the rank's blocks (all E of each), ÷ tp
  std::int64_t largest_output = 0;
  std::int64_t largest_conv_output = 0;  // the CPU's stand-in for a convolution's im2col scratch
  std::int64_t attention_scratch = 0;    // the CPU attention kernel's, cp-aware (cpu_cp_attention_scratch_bytes)
  std::int64_t cpu_scratch = 0;  // the CPU kernels' scratch for bf16 operands widened (whole sequences)
  std::int64_t cp_exchange = 0;  // the largest cp exchange of the rank's attention blocks (one runs at a time)
  // Per stage held by this rank, per sample: its blocks' costs in model order (one tp rank's).
  std::vector<std::vector<partition::BlockCost>> stage_blocks;
  // Per stage, per block: the buffers it holds only while it runs (cp_memory.hpp's attention_transients).
  std::vector<std::vector<BlockTransients>> stage_transients;
  // Per stage held by this rank, per sample: its input and output boundary tensors (0 at the model's ends).
  std::vector<std::int64_t> stage_in, stage_out;
};

// With tied embeddings the token table appears in the embedding's and the head's cost; a rank holding both (ZB-V)
// shares one Param, so the second occurrence adds only what is not the table. One tp rank's f32 bytes of it (0
// untied).
std::int64_t tied_table_bytes(const partition::ModelSpec& spec, int tp) {
  if (spec.tied_parameters.empty()) return 0;
  return (spec.token_sizes().vocab_size + tp - 1) / tp * spec.token_sizes().d_model * 4;
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
      r.stage_transients[st].push_back(
          attention_transients(block, s.micro, s.tp, s.cp, s.ring, s.bf16, s.on_cpu ? cpu.threads : 0));
      const partition::BlockCost a = rank_block_cost(block, bi, t, s);
      r.stage_blocks[st].push_back(a);
      r.largest_output = std::max(r.largest_output, a.output_bytes);
      // On the CPU only a convolution's im2col scales with its output (the stand-in below); the other blocks' ops
      // take no output-sized scratch.
      if (block.kind == partition::BlockKind::kConv2d) {
        r.largest_conv_output = std::max(r.largest_conv_output, a.output_bytes);
      }
      r.attention_scratch = std::max(
          r.attention_scratch, cpu_cp_attention_scratch_bytes(block, s.micro, s.tp, s.cp, s.ring, cpu.threads, s.bf16));
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

// The walk over the rank's actions (activation_walk.hpp) on each stage's backward memory.
ActivationWalkPeaks rank_activation_peaks(const Plan& plan, int pp_rank, const RankBlocks& r, const RankShape& s) {
  std::vector<StageBackwardMemory> stage_memory(r.stage_blocks.size());
  for (std::size_t si = 0; si < r.stage_blocks.size(); ++si) {
    if (!r.stage_blocks[si].empty()) stage_memory[si] = stage_backward_memory(r.stage_blocks[si], r.stage_transients[si]);
  }
  const WalkScale scale{s.micro, s.bf16 ? 2 : 1, s.cp};
  return activation_walk_peak(plan, pp_rank, stage_memory, r.stage_in, r.stage_out, scale);
}

// The workspace category's bytes, and what of it is the attention kernel's scratch held only inside its block (a
// transient counted in the category).
struct Workspace {
  std::int64_t bytes = 0, transient = 0;
};

Workspace rank_workspace(const Plan& plan, int pp_rank, const RankBlocks& r, const RankShape& s, const CpuKernels& cpu) {
  const std::int64_t micro = s.micro;
  const int cp = s.cp;
  // Workspace without the run's CPU kernels (the planner pricing layouts; other devices): the largest block output
  // of a micro-batch (a transient output or gradient; the allocator's workspace peak equalled it in the fp32 layouts
  // measured before attention became memory-efficient) or CPU bf16's widened operands.
  if (!(s.on_cpu && cpu.threads > 0)) return {std::max(r.largest_output * micro / cp, r.cpu_scratch / cp), 0};
  // The run's own CPU kernels (the trainer's plan): the scratch the ops take, no block output stand-in (the lm
  // head's logits had put the workspace 5,980 B over on the head's rank, ScheduleMemory at pp2), plus what the
  // executor holds all step (pipeline/executor.cpp): the loss scale (one f32) and, on the rank with the last
  // stage, the step's losses (one f32 per micro-batch). The vocabulary-parallel cross-entropy's row maxima and
  // sums (3 f32 per local row, tp > 1) are scratch too.
  const std::int64_t rows = micro * plan.spec.blocks.back().input.rows() / cp;
  const bool loss_here = plan.stage_to_rank(plan.num_stages() - 1) == pp_rank;
  const std::int64_t vocab_parallel =
      s.tp > 1 && loss_here && plan.spec.blocks.back().kind == partition::BlockKind::kSoftmaxCrossEntropy ? 12 * rows
                                                                                                           : 0;
  const std::int64_t others = std::max({r.cpu_scratch / cp, r.largest_conv_output * micro / cp, vocab_parallel});
  const std::int64_t executor = 4 + (loss_here ? 4 * plan.schedule.num_microbatches : 0);
  // The attention kernel's scratch lives inside its block (the walk's transients), where it is the largest.
  return {std::max(r.attention_scratch, others) + executor, std::max<std::int64_t>(0, r.attention_scratch - others)};
}

}  // namespace

std::int64_t MemoryPlan::total() const {
  std::int64_t sum = 0;
  for (auto b : bytes) sum += b;
  return sum - transients_in_categories + transients_above_activations;
}

std::string MemoryPlan::breakdown() const {
  std::string out;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    if (bytes[static_cast<std::size_t>(c)] == 0) continue;
    out += fmt::format("{} {}, ", memory_category_name(static_cast<MemoryCategory>(c)),
                       format_bytes(bytes[static_cast<std::size_t>(c)]));
  }
  out += "total " + format_bytes(total());
  if (host_pinned > 0) out += "; host pinned " + format_bytes(host_pinned) + " (page-locked host memory, not in the total)";
  return out;
}

MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, double ep_imbalance,
                                partition::AttentionKind attention) {
  return estimate_rank_memory(plan, config, pp_rank, unresolved_cpu_kernels(config), ep_imbalance, attention);
}

MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, const CpuKernels& cpu,
                                double ep_imbalance, partition::AttentionKind attention) {
  const RankShape s = rank_shape(plan, config, cpu, ep_imbalance, attention);
  const RankBlocks blocks = gather_rank_blocks(plan, pp_rank, model_cost_tables(plan.spec, s), s, cpu);
  const ActivationWalkPeaks walk = rank_activation_peaks(plan, pp_rank, blocks, s);
  MemoryPlan m;
  auto at = [&m](MemoryCategory c) -> std::int64_t& { return m.bytes[static_cast<std::size_t>(c)]; };
  set_state_memory(m, plan, config, pp_rank, blocks.param_bytes, blocks.expert_bytes);
  // Mixed precision: bf16 activations and boundary tensors (the f32 statistics and i32 ids and targets were counted
  // twice in rank_block_cost, so they stay whole). The boundary tensors in flight are in the walk's stashes. History:
  // a flat two receives and the send just posted (ZB-V at pp2, d256 GPT: +2.4% / -1.2% measured; ZB-H2 and
  // interleaved at micro-batch 16 +6.0..+7.1%; zb_h1 at tp2 x pp2 +1.1..7.8%). The walk, measured at zb_h1 tp2 x pp2
  // (SequenceParallel.SplitBackwardMemoryFollowsThePlan) and at ZB-H2, interleaved 1F1B, ZB-V and DualPipeV at pp2
  // and tp2 x pp2 with and without sequence parallelism (ScheduleMemory.EveryScheduleFollowsThePlan): every rank
  // within one boundary tensor of the measured activation peak, two on a loaded machine (a send completing later
  // than the test after the next compute action, or sooner).
  at(MemoryCategory::kActivations) = walk.stashes * s.micro / (s.bf16 ? 2 : 1) / s.cp;
  const Workspace workspace = rank_workspace(plan, pp_rank, blocks, s, cpu);
  at(MemoryCategory::kWorkspace) = workspace.bytes;
  m.transients_in_categories += workspace.transient;
  // Context parallelism's K/V exchange buffers: one attention block's at a time, on top of the gradient
  // reduction's bf16 twins (which may be alive meanwhile: the persistent ones are). Measured against the allocator's
  // communication peak in ContextParallel.ActivationMemoryFollowsThePlan.
  m.cp_exchange = blocks.cp_exchange;
  at(MemoryCategory::kCommunication) += blocks.cp_exchange;
  // The exchange buffers (and the attention kernel's scratch) live only while their attention block runs: the total
  // counts what the walk holding them inside their blocks adds above the activation peak, not their own peaks (the
  // ring's were 2.04% / 1.95% over the measured total at cp2 / cp4 when added to the activation peak).
  m.transients_in_categories += blocks.cp_exchange;
  m.transients_above_activations = walk.with_transients - at(MemoryCategory::kActivations);
  // The page-locked host memory a GPU run pins (batches, losses row, moe staging), reported apart (host_memory.hpp).
  if (config.device.type == DeviceType::kCuda) m.host_pinned = host_pinned_peak(plan, config, pp_rank);
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
