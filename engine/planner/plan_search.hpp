// The plan search behind `cleave plan`: every layout of a config on `world` ranks (tp dividing heads and
// d_ff and within a node, pp up to the block count, dp the rest; every schedule with its virtual stages;
// every micro-batch size dividing the per-replica batch; ZeRO 0 to 3 when dp > 1; for a moe model every expert-
// parallel size ep dividing the experts and dp × cp (with the ZeRO stages the engine allows it); sequence parallelism off
// and on when tp > 1; recomputation none, selective and full for a gpt), each checked by the
// engine's own config and plan code (so a plan the search returns is one `cleave train` accepts), its
// memory estimated per pp rank by the trainer's memory plan (engine/run_plan/memory_plan.hpp) and its step
// timed by the pipeline simulator with per-stage costs from a hardware profile, priced term by term
// (engine/planner/step_terms.hpp: compute per block and pass, recomputation, tensor-parallel collectives, the
// context-parallel exchange, expert parallelism's all-to-alls and its busiest rank's expert GEMMs, ZeRO's gathers,
// the data-parallel reduction, the optimizer step; the formulas in docs/planner.md, "The step, term by term"), and
// split back into those terms on the busiest rank, with its idle time as point-to-point waits and bubble
// (PlanEstimate::breakdown; `cleave plan --explain`). One estimate's steps have files of their own: the candidate
// planned as the engine runs it (plan_candidate.hpp), its memory (plan_memory.hpp), its step priced
// (plan_pricing.hpp).
// Invariant: a plan whose estimated peak on any pp rank exceeds the cap is never ranked; it is kept with
// the reason so the caller can say why nothing fits.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/planner/ep_imbalance_default.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/step_breakdown.hpp"
#include "engine/planner/search_cache.hpp"
#include "partition/block_work.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {

struct PlanChoice {
  int tp = 1, pp = 1, dp = 1;
  int virtual_stages = 1;
  std::string schedule = "1f1b";
  std::int64_t micro_batch = 1;
  int zero_stage = 0;
  partition::Recompute recompute = partition::Recompute::kNone;
  std::int64_t global_batch = 0;  // kept from the config
  bool sequence_parallel = false; // parallel.sequence_parallel (tp > 1 only)
  // optimizer.zero_reduce for ZeRO-2 and 3 (the search prices per_microbatch and per_step; kAuto below stage 2).
  config::ZeroReduce zero_reduce = config::ZeroReduce::kAuto;
  // Context parallelism (parallel.context_parallel_size, _comm): searched beside tp, pp and dp for language
  // models; dp above is the data-parallel size proper (world = tp × cp × dp × pp).
  int cp = 1;
  config::ContextParallelComm cp_comm = config::ContextParallelComm::kRing;
  // Expert parallelism (parallel.expert_model_parallel_size; moe models): ep ranks taken from the dp × cp ranks
  // split each moe block's experts (the world stays tp × cp × dp × pp).
  int ep = 1;
  // Expert parallelism's memory figures (parallel.ep_stash_imbalance, ep_peak_imbalance; 0: the dropless bound): the
  // source config's at its own ep, 0 at any other (figures measured at one ep say nothing of another's routing).
  double ep_stash_imbalance = 0.0, ep_peak_imbalance = 0.0;
  // The ranks the plan runs on: tp × cp × dp × pp.
  int world() const { return tp * cp * dp * pp; }
  // "tp2 pp2 dp1"; "tp2 cp2 pp2 dp1" (ring) or "... cp2a2a ..." when cp > 1; " ep2" appended when ep > 1
  std::string layout() const;
  std::string dense_layout() const;  // layout() without the ep part
  // The zero column of `cleave plan`: the stage, with "m" (per micro-batch) or "s" (per step) for ZeRO-2/3.
  std::string zero_label() const;
  // The --set overrides that select this plan (parallel.*, batch.*, optimizer.zero_stage, train.recompute): every
  // key apply_to() sets, so load_config(base, overrides()) is apply_to(base) whatever base holds.
  std::vector<std::string> overrides() const;
  // `base` with the same keys set as overrides() would, then config::validate(): the typed way the search
  // edits a candidate. Throws ConfigKeyError for a candidate the config's cross-key checks refuse.
  config::RunConfig apply_to(const config::RunConfig& base) const;
};

// Expert parallelism: one moe block's exchanges per micro-batch (the first moe block of the first stage with one; zeros
// without ep), split into what the exchanges cost and what a rank waits at them for its peers' compute, the split
// the router log's moe_ep_<kind>_ms and moe_ep_<kind>_wait_ms measure (engine/train/router_metrics.hpp).
struct EpExchangePrice {
  double all_to_all_s = 0;     // the four all-to-alls' latency and bytes (ep_all_to_all_s), with a full rerun's two
  // Their meetings: sync_wait_per_meeting, the handoffs to time-shared peers and (more ranks than cores) the waits for
  // the ranks holding the peers' cores (ep_core_holder_wait_s).
  double meetings_s = 0;
  double count_exchange_s = 0; // the count exchange with its meeting (F, and the rerun's under full recomputation)
  double peer_wait_s = 0;      // the peers' lost time (sync_wait_per_compute) waited at the count exchange and here
  // The busiest ep rank's extra expert compute over the mean rank's (expert_imbalance_compute less the mean rows'),
  // F, I with its rerun and W, at the core sharing: what the ranks wait for it at the exchanges, on average over the
  // ep ranks (the busiest waits none, the mean rank all of it, and max - mean is the mean of max - each).
  double imbalance_wait_s = 0;
  double own_s() const { return all_to_all_s + meetings_s + count_exchange_s; }
  double wait_s() const { return peer_wait_s + imbalance_wait_s; }
};

struct PlanEstimate {
  PlanChoice choice;
  bool valid = false;          // the engine accepts the layout (else `reason` says why)
  bool fits = false;           // valid and every pp rank's estimate <= cap
  std::string reason;          // why invalid / over the cap
  double step_s = 0;           // predicted step time
  double items_per_s = 0;      // tokens (gpt) or samples per second, global
  double bubble = 0;           // simulated bubble fraction of the pipeline
  double comm_bytes = 0;       // bytes a rank sends per step (tp, dp, ZeRO-3 gathers, P2P), mean over pp ranks
  std::int64_t peak_bytes = 0; // max over pp ranks of the memory plan's total
  int peak_rank = 0;
  std::array<std::int64_t, kNumMemoryCategories> peak_by_category{};  // of that rank
  // The memory plan's host line (MemoryPlan::host_pinned): the page-locked host memory a rank holds when the plan
  // runs on a GPU (planned_device: the config's device.type cuda, or a cuda profile): its staged micro-batches, the
  // losses row and its moe blocks' routing staging; the largest over pp ranks and that rank. Host memory: not in
  // peak_bytes and never under the cap. 0 on the CPU.
  std::int64_t host_pinned_bytes = 0;
  int host_pinned_rank = 0;
  StepBreakdown breakdown;     // where step_s goes, term by term (sums to it)
  double ep_imbalance = 1.0;  // the factor the plan was priced with (1 without ep)
  // Where it came from (choose_ep_imbalance): the option, the profile's measured figure at the plan's ep, the
  // uniform-routing formula; kNone without ep. `cleave plan --json`'s ep_imbalance_source.
  EpImbalanceSource ep_imbalance_source = EpImbalanceSource::kNone;
  // The ep figures its memory plan sized the rows at (run_plan::ep_memory_figures: the flags, else the candidate's
  // config's keys, else the dropless bound; 1 without ep): `cleave plan --json`'s ep_memory_imbalance.
  partition::EpMemoryImbalance ep_memory{1.0};
  // The four all-to-alls of one moe block and micro-batch on the busiest ep rank, forward and backward (0 at ep 1);
  // over the step they are breakdown's expert_all_to_all term (in breakdown.tp_comm_s with the tp and cp exchanges).
  double ep_all_to_all_s = 0;
  EpExchangePrice ep_exchange;  // the same block's exchanges, split into their own time and the waits at them
  // Ranks on a node and its cores (0 = a device per rank); compute and the optimizer step are priced
  // core_sharing times what the profile measured (HardwareProfile::core_sharing); oversubscribed() when ranks
  // outnumber cores.
  int ranks_on_node = 1, cores_per_node = 0;
  double core_sharing = 1.0;
  // Priced from the profile's time_sharing (step_terms.hpp, time_shared): the compute's factor beyond the share of the
  // cores (in core_sharing) and one handoff (a collective waits one or more: collective_handoffs); 1 and 0 where it is
  // not.
  double time_shared_compute = 1.0, handoff_s = 0;
  // A pipeline over more ranks than cores: what each transfer's receiver waits for its core's holder to end an action
  // (step_terms.hpp, core_holder_wait_s); 0 where it is not.
  double core_holder_wait_s = 0;
  // Expert parallelism over more ranks than cores: what each all-to-all and count exchange waits for the ranks holding
  // its peers' cores (step_terms.hpp, ep_core_holder_wait_s); 0 where it is not.
  double ep_core_holder_wait_s = 0;
  // Tensor or context parallelism over more ranks than cores: what a tp collective, cp all-to-all or ring hop waits
  // per peer for the rank holding that peer's core (step_terms.hpp, peer_core_holder_wait_s); 0 where it is not.
  double group_core_holder_wait_s = 0;
  bool oversubscribed() const { return cores_per_node > 0 && ranks_on_node > cores_per_node; }
};

// "tp1 pp2 dp2 puts 4 ranks on a node of 2 cores (2.0 ranks per core): ..." for an oversubscribed plan, else "".
std::string oversubscription_warning(const PlanEstimate& estimate);

// What estimate_plan can also hand back for one plan (cleave simulate --config): the simulated step, the
// memory plan of every pp rank, and each rank's memory over the step in bytes (plan_memory.hpp, memory_over_step):
// what the plan's total holds beside its activation walk (parameters, gradients, optimizer state, the communication
// and workspace not held only inside an attention block) plus the plan's stage stashes, which rise by a stage's
// stash at each F; at the end of I the stash becomes what W needs, freed by W (a fused B frees the forward stash);
// while an action runs it holds its blocks' backward peak or an attention block's transient buffers on top.
struct MemoryPoint {
  double time_s = 0;
  std::int64_t bytes = 0;
};
struct PlanDetails {
  pipeline::SimulationResult simulated;
  std::vector<std::array<std::int64_t, kNumMemoryCategories>> memory_plan;  // per pp rank
  // per pp rank: the plan's total (MemoryPlan::total(), the figure checked against the cap: below the categories'
  // sum by what the buffers an attention block holds only while it runs do not add above the activation peak)
  std::vector<std::int64_t> memory_total;
  std::vector<std::int64_t> cp_exchange;  // per pp rank: of memory_plan's communication, cp's K/V exchange buffers
  std::vector<std::int64_t> host_pinned;  // per pp rank: the page-locked host staging (PlanEstimate::host_pinned_bytes)
  std::vector<std::vector<MemoryPoint>> memory_timeline;                   // per pp rank
  std::vector<std::int64_t> timeline_peak;                                 // per pp rank
};

struct SearchOptions {
  int world = 1;
  std::int64_t memory_limit = 0;  // bytes per rank; 0 = the profile's device memory, or none
  // Megatron-LM's scatter/gather of boundary tensors (a model option; the engine sends whole tensors): each tp
  // rank sends 1/tp of a stage's output and the receiving tp group all-gathers it inside the node.
  bool scatter_gather_boundaries = false;
  // The attention kernel the simulated run used (a model option; the engine runs memory-efficient attention):
  // `cleave simulate --attention`, priced by attention_probabilities_compute (step_terms.hpp) on a roofline profile;
  // its stored tensors are an input of the memory plan (run_plan::estimate_rank_memory's `attention`).
  partition::AttentionKind attention = partition::AttentionKind::kMemoryEfficient;
  // Kernels the simulated run launched beyond the engine's own (run options; roofline profiles): `cleave simulate
  // --cross-entropy float32` (Megatron-LM's unfused vocab-parallel cross-entropy over f32 logits) and
  // `--hidden-dropout` (Megatron-LM's hidden dropout), `--dense-embedding-grad` (PyTorch's dense embedding gradient
  // added into Megatron-LM's f32 main gradient), priced by block_compute as partition::run_kernels_work.
  partition::RunKernels run_kernels{};
  // PyTorch FSDP2's all-gather copy-out (a run option; roofline profiles; ZeRO-3 with replicas): `cleave simulate
  // --fsdp2-copy-out`. Before a block's F and again before its I (resharded after the forward), FSDP2 copies the
  // flat all-gather output into the block's unsharded parameters on the compute stream
  // (torch/distributed/_composable/fsdp: FSDPParamGroup::wait_for_unshard -> foreach_all_gather_copy_out,
  // torch.split_with_sizes_copy): one kernel reading and writing the gathered bytes, 2 x act_bytes x the tp rank's
  // parameters of the block, added to F and to I in the elementwise and kernel_launch terms (step_terms_compute.cpp).
  // The engine gathers into the parameters' own storage and copies nothing.
  bool fsdp2_copy_out = false;
  // What train.recompute selective reruns in the simulated run (a run option; roofline profiles): `cleave simulate
  // --selective-recompute torchtitan_op` prices torchtitan's per-op policy (partition::selective_op_rerun) in
  // block_compute's recompute term in place of the engine's attention-core rerun; the memory plan keeps selective's.
  partition::SelectiveRecompute selective_recompute = partition::SelectiveRecompute::kAttention;
  // What the simulated run overlapped with compute (run options; the engine's trainer overlaps neither):
  // `cleave simulate --overlap-grad-reduce` (Megatron-LM's --overlap-grad-reduce --overlap-param-gather, FSDP): the
  // gradient reduction runs block by block behind the last micro-batch's backward and ZeRO-1/2's parameter gather
  // behind the next step's forward (overlapped_reduction_s, overlapped_gather_s in step_terms.hpp);
  // `--tp-comm-overlap` (Megatron-Core with Transformer Engine's userbuffers): a block's tp collectives run under that
  // block's compute of the same pass (tensor_parallel_overlap).
  bool overlap_grad_reduce = false;
  bool overlap_tp_comm = false;
  // Whether the simulated run's pipeline point-to-point blocks (a run option; the engine's is asynchronous):
  // `cleave simulate --blocking-p2p`, Megatron-LM of 2021 (p2p_communication.py: batch_isend_irecv, wait on every
  // request, torch.cuda.synchronize): each batch of SEND/RECV holds the rank until its transfers are done
  // (pipeline::SimulationCosts::blocking_p2p).
  bool blocking_p2p = false;
  // Whether the simulated run synchronises its pp ranks before the optimizer step (a run option; the engine's trainer
  // does): `cleave simulate --optimizer-post-validation`, the zero-bubble paper's post-validation (Qi et al., ICLR
  // 2024, section 4: each stage steps once its own backward is done; the global gradient-norm and NaN checks follow
  // through the pipeline and roll the step back if they fail), so one step's warm-up overlaps the previous step's
  // drain and a step costs the longest per-rank span (first work action to the end of its optimizer step: the
  // paper's "cost", the largest execution time of all stages), not the makespan (pipeline::TimelineStats).
  bool optimizer_post_validation = false;
  // Schedule `auto` searched on this estimate's own prices (a run option, `cleave simulate --auto-schedule-priced`):
  // F, I and W the median over the stages of the priced stage costs (the zero-bubble paper's scheduler takes the
  // median of its profiled per-stage times) and the priced P2P transfers (latency + boundary bytes / bandwidth),
  // with the config's auto_schedule_memory_limit, _weight_stash_fraction and _objective; without it the search
  // reads the cost model's FLOP ratio and no P2P (or parallel.auto_schedule_profile). Hardware profiles only.
  bool auto_schedule_priced = false;
  // What ZeRO-1/2's parameter all-gather after the optimizer step moves (a run option): false = the f32 master
  // values, as the engine's trainer gathers them (DataParallel::sharded_step); true = the bf16 model parameters, as
  // Megatron-LM's distributed optimizer gathers them in a bf16 run (`cleave simulate --param-gather-dtype bf16`;
  // needs device.precision bf16). Half the bytes.
  bool param_gather_bf16 = false;
  // Expert parallelism: the busiest ep rank's routed rows over the mean, which times the all-to-alls and the
  // busiest rank's expert GEMMs (`cleave plan --ep-imbalance`); 0 = the default (choose_ep_imbalance): the profile's
  // measured figure at the plan's ep (HardwareProfile::routing_imbalance), else the workload's expected figure for
  // uniformly random top-k routing (partition::workload_ep_imbalance). The time's figure only: the memory plan's is
  // ep_memory.
  double ep_imbalance = 0;
  // Where ep_imbalance (> 0) came from: the option as given, or the default once with_ep_imbalance resolved it.
  EpImbalanceSource ep_imbalance_source = EpImbalanceSource::kOption;
  // Expert parallelism's rows for the memory plan (`--ep-stash-imbalance`, `--ep-peak-imbalance`): a field 0 = the
  // candidate's config's key (PlanChoice::ep_stash_imbalance, ep_peak_imbalance: the source's at its own ep), else the
  // dropless bound (partition::workload_ep_row_bound), which no routing exceeds (partition::EpMemoryImbalance).
  partition::EpMemoryImbalance ep_memory{};
  // false: a plan over the cap is returned once its memory is known (valid, fits false, the reason, the peak and
  // its categories), without its step priced (step_s, breakdown, ... stay 0). search_plans sets it: nothing reads an
  // over-cap plan's time (cleave plan counts those plans and names the one closest to the cap by memory).
  bool price_over_cap = true;
};

struct SearchResult {
  // Fitting plans, fastest first; equal times: less peak memory, then fewer bytes communicated.
  std::vector<PlanEstimate> ranked;
  std::vector<PlanEstimate> rejected;  // invalid or over the cap, with reasons (over the cap: memory, no time)
  std::int64_t memory_limit = 0;       // the cap used (0 = none)
  std::string unit;                    // "tok" or "samples"
};

// What `cleave plan` and `cleave simulate --config` plan against: the profile file, or this machine measured
// now for the config's model; and the memory cap: `limit_text` (e.g. "64MiB"), else device.memory_limit, else
// the profile's device memory (0 = none). A cpu profile with a core count plans every rank on the one machine it
// describes (its ranks_per_node raised to `world`, its device memory shared the same way), so a world larger than
// the profile's ranks shares its cores and memory.
struct PlanningSetup {
  HardwareProfile profile;
  SearchOptions options;
};
PlanningSetup planning_setup(const config::RunConfig& base, const std::string& profile_path,
                             const std::string& limit_text, int world);

// A profile with measured block tables must hold every block shape of `spec` in the config's precision:
// throws Error naming the profile and the shapes it lacks (a profile made for another model).
void check_profile_matches(const HardwareProfile& profile, const partition::ModelSpec& spec, bool bf16);

// Searches every plan of the config (file `config_path` + `overrides`). Throws Error for a world size no
// layout divides, or a config that is invalid on its own.
SearchResult search_plans(const std::string& config_path, const std::vector<std::string>& overrides,
                          const HardwareProfile& profile, const SearchOptions& options);

// Estimates one plan (what search_plans does for each). Never throws for a bad layout: valid = false.
// The device a plan is for: cuda on a GPU's profile (`cleave plan --write` writes device.type cuda then) whatever
// the config says, else the config's device.type (a cuda config planned on a CPU profile stays a GPU run).
// estimate_plan sets the candidate's device.type to it before the memory plan, so its device-only parts (the CPU's
// bf16 widening scratch, the host line) are the planned device's.
DeviceType planned_device(const config::RunConfig& config, const HardwareProfile& profile);

PlanEstimate estimate_plan(const std::string& config_path, const std::vector<std::string>& overrides,
                           const PlanChoice& choice, const HardwareProfile& profile, const SearchOptions& options,
                           PlanDetails* details = nullptr);
// The same from the config already read (`base`: file `origin` + `overrides`, which only name where a refused
// key came from in the reason, as parse_config would): the candidate is a typed edit of `base`, not re-parsed.
// `cache` (optional): what earlier estimates of the search built, reused (SearchCache: the pipeline schedules, the
// ep imbalance's integral; the estimate is the same with or without it).
PlanEstimate estimate_plan(const config::RunConfig& base, std::string_view origin,
                           const std::vector<std::string>& overrides, const PlanChoice& choice,
                           const HardwareProfile& profile, const SearchOptions& options,
                           PlanDetails* details = nullptr, SearchCache* cache = nullptr);

// The plan a config itself describes on `world` ranks (its parallel.*, batch, ZeRO and recompute keys).
PlanChoice choice_of_config(const std::string& config_path, const std::vector<std::string>& overrides, int world);

}  // namespace cleave::planner
