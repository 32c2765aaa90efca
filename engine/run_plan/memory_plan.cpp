// See memory_plan.hpp. This file combines one pp rank's categories; each category's model lives in its own file:
// rank_blocks (the rank's blocks' costs, boundary tensors and scratch), param_counts (one tp rank's parameters),
// state_memory with zero_units and microbatch_buckets (parameters, gradients, optimizer state under ZeRO),
// activation_walk (the stashes and boundary tensors over the schedule), cp_memory (context parallelism's attention
// state and exchange buffers) and workspace_memory (the CPU kernels' scratch).
#include "engine/run_plan/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/run_plan/activation_walk.hpp"
#include "engine/run_plan/host_memory.hpp"
#include "engine/run_plan/rank_blocks.hpp"
#include "engine/run_plan/state_memory.hpp"
#include "partition/cp_rules.hpp"

namespace cleave::run_plan {
namespace {

// Each stage's backward memory (empty for the stages of other ranks).
std::vector<StageBackwardMemory> stage_memories(const RankBlocks& r) {
  std::vector<StageBackwardMemory> stage_memory(r.stage_blocks.size());
  for (std::size_t si = 0; si < r.stage_blocks.size(); ++si) {
    if (r.stage_blocks[si].empty()) continue;
    stage_memory[si] = stage_backward_memory(r.stage_blocks[si], r.stage_transients[si]);
  }
  return stage_memory;
}

// The walk over the rank's actions (activation_walk.hpp) on each stage's backward memory.
ActivationWalkPeaks rank_activation_peaks(const Plan& plan, int pp_rank, const RankBlocks& r, const RankShape& s) {
  const WalkScale scale{s.micro, s.bf16 ? 2 : 1, s.cp};
  return activation_walk_peak(plan, pp_rank, stage_memories(r), r.stage_in, r.stage_out, scale);
}

// The workspace category's bytes, and what of it is the attention kernel's scratch held only inside its block (a
// transient counted in the category).
struct Workspace {
  std::int64_t bytes = 0, transient = 0;
};

Workspace rank_workspace(const Plan& plan, int pp_rank, const RankBlocks& r, const RankShape& s,
                         const CpuKernels& cpu) {
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
  // The attention kernel's scratch and a moe block's routing weights' gradient live inside their blocks (the walk's
  // transients), where they are the largest.
  return {std::max(r.block_scratch, others) + executor, std::max<std::int64_t>(0, r.block_scratch - others)};
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

MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank,
                                partition::EpMemoryImbalance ep_imbalance,
                                partition::AttentionKind attention) {
  return estimate_rank_memory(plan, config, pp_rank, unresolved_cpu_kernels(config), ep_imbalance, attention);
}

MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, const CpuKernels& cpu,
                                partition::EpMemoryImbalance ep_imbalance, partition::AttentionKind attention) {
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

RankStageMemory rank_stage_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, const CpuKernels& cpu,
                                  partition::EpMemoryImbalance ep_imbalance, partition::AttentionKind attention) {
  const RankShape s = rank_shape(plan, config, cpu, ep_imbalance, attention);
  const RankBlocks blocks = gather_rank_blocks(plan, pp_rank, model_cost_tables(plan.spec, s), s, cpu);
  RankStageMemory out;
  out.stages = stage_memories(blocks);
  out.micro = s.micro;
  out.dtype_divisor = s.bf16 ? 2 : 1;
  out.cp = s.cp;
  const MemoryPlan m = estimate_rank_memory(plan, config, pp_rank, cpu, ep_imbalance, attention);
  out.outside_walk = m.total() - m.bytes[static_cast<std::size_t>(MemoryCategory::kActivations)] -
                     m.transients_above_activations;
  return out;
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
