// Memory plan: what one rank will hold, by allocator category, before anything is allocated — so a model
// that does not fit under device.memory_limit is refused with the numbers instead of failing mid-step.
//
// Estimate per pp rank (parameters, gradients and optimizer state one tp rank's: the replicated parameters
// (BlockCost::replicated_param_count) whole, the rest ÷ tp, vocab-parallel tables as ceil(V / tp) rows; activations
// one tp rank's, the cost model's tp layout: LayerNorm and column-parallel inputs whole, the rest sharded, under
// parallel.sequence_parallel those too as sequence shards, boundary tensors included; ZeRO-1 to 3 divide
// optimizer state by dp; ZeRO-2's per-micro-batch buckets and ZeRO-3's units hold the same tp rank's counts):
//   parameters       Σ param bytes of the rank's stages (a tied table counted once per rank); bf16: + half that
//                    (the working copies). ZeRO-3: units instead, one per block of a stage (the parameters whose
//                    first block in the stage it is; a tied table split over pp ranks is a unit of its own, on its
//                    head's rank it is in the embedding's unit), each laid out as its gradient bucket (each tensor
//                    from a 64-byte boundary, partition::block_param_tensors; the unit to 16 f32 elements, then to a
//                    multiple of dp): Σ units / dp x (4 B, bf16: 6 B) for the f32 master and
//                    bf16 working shards, plus the most units held in full at once in the compute dtype (4 B,
//                    bf16: 2 B): a block's and the next block's of the same stage (prefetched), a tied head's
//                    with the embedding's unit it reads; W gathers nothing
//   gradients        = parameters (train.deterministic: x (1 + floor(log2 micro-batches)), the partial sums);
//                    ZeRO-2: at least the full buckets plus one bucket's shard (÷ dp), the moment the first
//                    reduced bucket moves to its shard before its buffer is released; ZeRO-3: the same with a
//                    bucket per unit: 4 B x Σ units + max(partial sums, the first reduced unit ÷ dp: the last
//                    block with parameters of the stage whose last W (or B) comes first). ZeRO-2 and 3 reduced
//                    per micro-batch (optimizer.zero_reduce): the shards (Σ buckets ÷ dp) plus the most bucket
//                    buffers alive at once over the rank's weight-gradient passes in schedule order (a bucket from
//                    the W of its first writing block until the next launch after its own; bf16 wire: its f32
//                    buffer only until its launch, plus one widened shard), a tied table split over pp ranks in
//                    full (reduced per step); ZeRO-2's buckets there are whole blocks of a stage packed up to
//                    parallel.dp_bucket_mb, a tied table both of whose blocks are on the rank a bucket of its own
//   optimizer_state  adamw 2x, sgd with momentum 1x, plain sgd 0x of parameters (÷ dp with ZeRO-1 to 3; ZeRO-3
//                    of the padded units)
//   activations      the peak, over the rank's actions in schedule order, of the stashes held: F adds a
//                    stage's forward stash (cost model: exactly what forward() keeps under train.recompute),
//                    I trades it for what W needs (weight_stash_bytes: inputs and output gradients of the
//                    weights), W or a fused B frees it; inside I and B the blocks run backward last to first,
//                    each holding its backward_extra_bytes (dy, the gradients it allocates, a recomputed
//                    block's rebuilt stash) on top of the stashes not yet freed, and inside W and B each weight
//                    gradient its weight_extra_bytes (sequence parallelism: the lm head's input gathered again)
//                    (stage_backward_memory);
//                    × micro-batch; plus the boundary tensors in flight at each point of the walk: the receive
//                    buffers posted and not yet consumed (a communication block's own and the next block's, posted
//                    early), an I's or B's dy through it, an action's output at its end and, when sent, through the
//                    next compute action, an output handed to a stage of the same rank until consumed, and on a
//                    rank holding the first and the last stage (ZB-V, DualPipeV) a micro-batch's targets from the
//                    first stage's F to the last stage's; a probabilities attention kind (the planner's `attention`
//                    input) adds the stored [T, T] tensors to each attention block's forward stash
//   communication    parallel.grad_reduce_dtype bf16 with dp > 1: a bf16 twin of every gradient bucket (per
//                    micro-batch: of the largest, one in flight at a time); plus, under context parallelism, the
//                    K/V exchange buffers of one attention block (cp_exchange_bytes, the largest of the rank's):
//                    with b the micro-batch, Tl = T / cp, Q = D / tp, K = Hkv·hd / tp, s the compute dtype's bytes,
//                      ring        2G + min(cp - 1, 2) · U,  U = b·Tl·2K·s one rank's K and V blocks, G the same
//                                  at 4 B: the held and the next block in flight, and in the backward the
//                                  travelling dK/dV (f32 in either precision) with its rotation target
//                      all_to_all  (2cp - 1) · b·Tl·(Q + 2K)/cp · s: cp send and cp - 1 receive blocks of the
//                                  widest tensor exchanged (q | k | v there, dqkv back)
//   experts          parallel.expert_model_parallel_size ep > 1: the routed experts' parameters, gradients and
//                    (without ZeRO) optimizer state ÷ ep; each moe block's routed-row stash (xp of D; g, u, h of
//                    F / tp; the weight stash's xp, do of D, dg, du, h of F / tp) at imbalance x T·k rows, not T·k,
//                    and its input gradient's rise the larger of the experts' phase (the received rows' d_o, dh,
//                    dg, du, dxp and the combine's receive buffer [T·k, D]) and the combine's (ep 1's mixture with
//                    those rows; partition/ep_costs.hpp) and the attention's; ZeRO 1-2 shard the
//                    experts' state over the dp x cp / ep ranks holding them: the same bytes per rank as at ep 1;
//                    ZeRO-3 with ep is not counted apart
//   workspace        without the run's CPU kernels (the planner; other devices) the largest of: a micro-batch's
//                    largest block output (a transient output or gradient), under bf16 on the CPU's widened GEMM path
//                    (CpuKernels::bf16_gemm) the widest GEMM's operands widened to f32, or three block outputs (an op
//                    widening its operands whole). With them (CpuKernels::threads > 0, the trainer's plan): the
//                    largest of the attention kernel's scratch (per thread; under cp over the whole sequence for
//                    all_to_all, over chunk pairs of T / 2cp with the partial output and log-sum-exp for ring), the
//                    widened operands, a convolution's output (im2col's stand-in) and the vocabulary-parallel
//                    cross-entropy's 3 f32 per row; plus the executor's loss scale (4 B) and, on the rank of the
//                    last stage, the step's losses (4 B per micro-batch). A moe block's routing weights' gradient
//                    ([micro · T / cp, k] f32) is workspace held inside the block's backward (a transient, below)
//   host_pinned      not device memory and not in total(): on a cuda device, the page-locked host memory of the
//                    rank (run_plan/host_memory.hpp), the peak over its actions of: on the ranks of the first and
//                    the last stage each micro-batch's inputs and targets (micro · (input + 4 · target rows) / cp B,
//                    from the F that loads it to the step's end; under cp the unsharded batch on top while it is
//                    sharded); the moe blocks' routing staging (partition/families/moe_staging.hpp), per moe block
//                    and micro-batch 16·n·k B (n = micro·T / cp tokens, k = top_k) plus, under cp with the
//                    load-balancing loss, 8·micro·(E + 1), held from its F to the end of its I or B, and under ep
//                    8·E inside the forward; plus the losses row, 4 B per global micro-batch and cp rank. 0 on the
//                    CPU (nothing pinned). Pageable host copies (moe logits, dlogits) are not counted
//   total()          the categories summed, except the buffers a block holds only while it runs (the cp exchange,
//                    the attention kernel's scratch, a moe block's routing weights' gradient): the activation walk
//                    holds them inside their blocks (BlockTransients; at cp 1 the attention scratch at the level of
//                    the attention core's backward, not at the block's peak where the mlp's or the mixture's phase
//                    is higher) and the total counts what they add above the activation peak
// It is an estimate; the allocator's cap still enforces the real limit at run time, and the measured peaks
// (metrics.jsonl peak_bytes) show how close it was.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/run_plan/plan.hpp"
#include "kernels/ops/cpu_blas.hpp"
#include "partition/block_work.hpp"
#include "partition/cost_model.hpp"
#include "partition/ep_costs.hpp"

namespace cleave::run_plan {

struct MemoryPlan {
  std::array<std::int64_t, kNumMemoryCategories> bytes{};  // peak per category within a step
  // Gradient bytes held between steps: all of them under ZeRO 0 and 1 (the buckets are reused), none under
  // ZeRO-2 and 3 (which hold only their shards, ÷ dp, from the reduction to the end of the optimizer step).
  std::int64_t gradients_between_steps = 0;
  // Of bytes[communication]: context parallelism's K/V exchange buffers (cp_exchange_bytes; 0 without cp).
  std::int64_t cp_exchange = 0;
  // Buffers alive only while an attention block runs (BlockTransients): what the categories count of them
  // (cp_exchange, and the CPU attention kernel's scratch where it is the workspace's largest transient), and what
  // they add above the activation peak when the walk holds them only inside their blocks (the walk with them, less
  // the walk without). total() counts the second instead of the first.
  std::int64_t transients_in_categories = 0;
  std::int64_t transients_above_activations = 0;
  // Page-locked host memory (the header comment's host_pinned line): reported apart, never under the device cap.
  std::int64_t host_pinned = 0;
  // The rank's peak: the categories' peaks summed, the attention blocks' transients only where they add to the
  // activation peak.
  std::int64_t total() const;
  std::string breakdown() const;  // "parameters 1.2 MiB, gradients ..., total ...[; host pinned ...]"
};

// What the plan reads of the CPU kernels a run uses, resolved before the plan by the caller from device.blas and the
// machine (the trainer: cpu_kernels_of in engine/train/rank_setup.hpp); read only when device.type is cpu.
struct CpuKernels {
  // The GEMM choice for bf16 operands (ops::resolved_cpu_gemm(config.device.blas, true)): widened into f32 workspace
  // (bf16_kernels false: device.blas openblas or blis, or a CPU without bf16 instructions), or oneDNN's bf16 kernels
  // (auto or onednn on a CPU with bf16 instructions), which widen nothing.
  ops::CpuGemmChoice bf16_gemm;
  // The kernels' OpenMP threads (ops::cpu_threads()): the attention kernel's scratch is per thread. 0: not counted.
  int threads = 0;
};

// ep_imbalance: expert parallelism's rows a rank's experts run over the mean, summed over its stashed blocks and in
// its busiest block (partition::EpMemoryImbalance; a field 0: the config's parallel.ep_stash_imbalance or
// ep_peak_imbalance, and where that is 0 too the dropless bound, partition::workload_ep_row_bound, which no routing
// exceeds: ep_memory_figures; one number sets both; `cleave plan --ep-stash-imbalance --ep-peak-imbalance` pass
// their own). Distinct from the time model's figure (`--ep-imbalance`, uniformly random routing by default).
// cpu: the run's resolved CPU kernels; the trainer's plan and its report pass the run's own, so the CPU workspace is
// exact on either kind of CPU.
// attention: the attention kernel the run uses (the engine's is memory-efficient; the planner prices a run that
// stores the probabilities, `--attention`): a probabilities kind adds to each attention block's forward stash what
// it keeps for the backward (partition::attention_probabilities_work's saved_bytes, one tp rank's heads, ÷ cp),
// freed by its I, so the walk, the cp exchange's share above the activation peak and the total are the run's own.
// Under recomputation nothing (the rerun rebuilds them inside I; not counted).
MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, const CpuKernels& cpu,
                                partition::EpMemoryImbalance ep_imbalance = 0,
                                partition::AttentionKind attention = partition::AttentionKind::kMemoryEfficient);
// Without the machine's facts (the planner pricing layouts, tests of other categories): unresolved_cpu_kernels, the
// widened GEMM path (an upper bound of the bf16 workspace where the GEMMs would run on bf16 kernels) and the
// attention kernel's per-thread scratch not counted.
MemoryPlan estimate_rank_memory(const Plan& plan, const config::RunConfig& config, int pp_rank,
                                partition::EpMemoryImbalance ep_imbalance = 0,
                                partition::AttentionKind attention = partition::AttentionKind::kMemoryEfficient);
// The ep figures a memory plan sizes the rows at (the rule of ep_imbalance above): each field of `given` where
// above 0, else the config's key, else the dropless bound of `spec` at the config's ep; {1, 1} at ep 1.
partition::EpMemoryImbalance ep_memory_figures(const partition::ModelSpec& spec, const config::RunConfig& config,
                                               partition::EpMemoryImbalance given = 0);
// device.blas resolved as on a CPU without bf16 instructions (bf16 operands widened to f32), threads 0.
CpuKernels unresolved_cpu_kernels(const config::RunConfig& config);

// The CPU attention kernel's scratch (kernels/cpu/flash_attention.hpp, flash_attention_workspace_floats) for one
// attention block of `block`, whole sequences (cp 1), `threads` threads, bf16 or f32 operands; 0 for a block without
// attention. Bytes; a thread's scratch is the same at every tp (heads split over tp change the kernel's tasks). The
// backward's partial dK / dV sums, taken when the kernel runs one task per query chunk (fewer batch x kv heads
// groups than twice the threads and not a multiple of them), depend on the groups of the kernel's call: `groups`
// (the micro-batch times the rank's kv heads) where the caller knows them, else (0) the most that take them,
// 2 threads - 1 (a bound: at T 8,192, 4 groups on 2 threads take none, and the bound counted 12 MiB).
std::int64_t cpu_attention_scratch_bytes(const partition::BlockSpec& block, int threads, bool bf16,
                                         std::int64_t groups = 0);

// Context parallelism's exchange buffers while one attention block's forward or backward runs, for a micro-batch
// of `micro` samples at tp, cp (ring or all_to_all) and `dtype_bytes` per element (the header comment's formula);
// 0 at cp 1 and for a block without attention.
std::int64_t cp_exchange_bytes(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp, bool ring,
                               std::int64_t dtype_bytes);

// One stage's activations per sample over its backward, from its blocks' costs in model order (one tp rank's):
// the forward stash F leaves, what I leaves for W, and how far above what was held when it started a split I,
// a split W and a fused B (each block's I then W) go while the blocks' backwards run last to first (each
// block's I holding its backward_extra_bytes, its W its weight_extra_bytes, on top of the stashes not yet
// freed or traded).
// Buffers alive only while an attention block runs (context parallelism's K/V exchange, the CPU attention kernel's
// scratch), per block (`transients`, empty where none): each phase of the block's forward or backward holds `bytes`
// (absolute, one micro-batch) while the block holds `below` (per sample, the units above) less than at the phase's
// reference point: in the forward the stash up to and with the block, in the backward its backward peak. The stage
// summary keeps each phase as what the action holds above its start then, and the bytes.
struct TransientPhase {
  std::int64_t below = 0, bytes = 0;
};
struct BlockTransients {
  std::vector<TransientPhase> forward, backward;
};
struct StagePhase {
  std::int64_t held = 0, bytes = 0;
};
struct StageBackwardMemory {
  std::int64_t forward_stash = 0, weight_stash = 0, input_peak = 0, fused_peak = 0, weight_peak = 0;
  std::vector<StagePhase> forward_transients, input_transients, fused_transients;
};
StageBackwardMemory stage_backward_memory(const std::vector<partition::BlockCost>& blocks,
                                          const std::vector<BlockTransients>& transients = {});

// The memory plan's activations of pp rank `pp_rank` as a timeline places them (the planner's memory_over_step): each
// stage's backward summary from the plan's own block costs (cp's attention state, ep's expert rows, bf16, a
// probabilities kind's stored tensors, the attention blocks' transients), indexed by stage (empty for the stages of
// other ranks), in the walk's units (per sample, whole-sequence f32); bytes() scales them as the plan does. Beside
// them, outside_walk: what the plan's total holds apart from its activation walk (total() less the walk's peak with
// the transients: parameters, gradients, optimizer state, the communication and workspace the blocks do not hold
// only while they run), so a timeline of one stage in the walk's order peaks at total() (less the boundary tensors in
// flight, which only the walk places). Arguments as estimate_rank_memory's.
struct RankStageMemory {
  std::vector<StageBackwardMemory> stages;
  std::int64_t micro = 1;
  int dtype_divisor = 1, cp = 1;
  std::int64_t outside_walk = 0;
  double bytes(std::int64_t units) const {
    return static_cast<double>(units) * static_cast<double>(micro) / dtype_divisor / cp;
  }
};
RankStageMemory rank_stage_memory(const Plan& plan, const config::RunConfig& config, int pp_rank, const CpuKernels& cpu,
                                  partition::EpMemoryImbalance ep_imbalance = 0,
                                  partition::AttentionKind attention = partition::AttentionKind::kMemoryEfficient);

// The message for the first pp rank whose estimate exceeds device.memory_limit (naming the rank, the
// bytes by category, the cap and what to change), or an empty string when every rank fits or no cap is set.
std::string memory_plan_violation(const Plan& plan, const config::RunConfig& config, const CpuKernels& cpu);

}  // namespace cleave::run_plan
