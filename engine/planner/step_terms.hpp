// The cost terms of one plan's step, one function per term (docs/planner.md, "The step, term by term"). Each
// prices its term for one block or one stage, per micro-batch (or per step where it says so), in seconds on one
// rank; stage_costs() assembles them into the ActionTerms of every F, I, W and REDUCE_GRAD the simulator times,
// and step_breakdown() walks the busiest rank's timeline back into a StepBreakdown. The definitions live one file
// per term or group of terms, step_terms_<term>.cpp (step_terms.cpp lists them).
//
// Invariants: a term never reads another term's output except where it overlaps with it (the ring exchange and
// ZeRO-3's prefetch hide behind the compute of their block, per-micro-batch reductions behind W), and then it
// takes that compute as an argument; a second of compute hides at most one transfer (ZeRO-3's prefetch gets what
// the ring left); compute terms are priced for one rank's share of a core by TermContext::core_sharing,
// communication terms are not. To add a term: see step_breakdown.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/planner/collective_handoffs.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/step_breakdown.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/cost_model.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {

// What every term of one plan reads; built once per plan by make_term_context().
struct TermContext {
  const run_plan::Plan* plan = nullptr;
  const config::RunConfig* config = nullptr;
  const PlanChoice* choice = nullptr;
  const HardwareProfile* profile = nullptr;
  const SearchOptions* options = nullptr;
  bool bf16 = false;
  DType dtype = DType::kF32;
  double act_bytes = 4;          // bytes of one activation element in the compute dtype
  double micro = 1;              // samples per micro-batch
  double micro_batches = 1;      // micro-batches per step per replica
  int replicas = 1;              // dp x cp: ranks holding the same parameters
  // dp x cp / ep: the expert-dp group, ranks holding the same experts; their gradients are reduced (and ZeRO shards
  // them) over it, not over the replicas (engine/train/data_parallel.hpp). replicas without ep.
  int expert_replicas = 1;
  int zero = 0;                  // the ZeRO stage in effect (0 without replicas)
  bool per_microbatch = false;   // ZeRO-2/3 reduce-scatter every micro-batch
  bool fused_backward = false;   // the schedule has B actions (a block's W runs right after its I)
  // Compute priced this many times the profile's block tables: HardwareProfile::core_sharing × compute_stretch.
  double core_sharing = 1.0;
  // 1 + the profile's measured compute_stretch (the lost time slices its medians leave out; 1 when not measured), or
  // of its stream_stretch where the plan streams_step and that is the larger. The optimizer's timing (milliseconds per
  // run, so its medians keep them) is priced without it.
  double compute_stretch = 1.0;
  // The plan's ranks meet no peer from the step's first pass to its gradient reduction (streams_the_step): its
  // compute is one stream, stretched by the profile's stream_stretch where that is the larger.
  bool streams_step = false;
  // More ranks on the node than cores, with the profile's time_sharing (time_shared): one handoff, what a meeting
  // with a peer (a tp collective, a cp hop, an ep all-to-all or count exchange, a pipeline transfer, a ZeRO gather,
  // the gradient reduction) waits for a descheduled peer to get a core; 0 otherwise. A collective waits
  // collective_handoffs of them at `ranks_per_core` (handoff_wait_s). Included in core_sharing: time_shared's compute.
  double handoff_s = 0;
  double ranks_per_core = 1.0;
  // The same where the holder is itself waiting at the meeting (the profile's yielding handoff): the unit of expert
  // parallelism's exchanges, whose every peer polls with a yield once there (ep_meeting_wait_s); 0 otherwise.
  double ep_handoff_s = 0;
  // The plan's ranks on the node over the profile's cores where they outnumber them (cores_per_node > 0; with or
  // without time_sharing), 1 otherwise: what a pipeline transfer's receiver waits for its core's holder
  // (core_holder_wait_s).
  double oversubscription = 1.0;
  bool one_node = true;          // every rank on one node
  const Link* p2p_link = nullptr;
  const Link* dp_link = nullptr;
  const Link* cp_link = nullptr;
  const Link* ep_link = nullptr;  // an ep group spans tp × ep consecutive ranks (ep is the fastest inside dp × cp)
  // Expert parallelism: the busiest ep rank's routed rows over the mean (SearchOptions::ep_imbalance, else the
  // default, choose_ep_imbalance: the profile's measured figure at this ep, else the workload's expected figure,
  // partition::workload_ep_imbalance); 1 without ep. And where it came from.
  double ep_imbalance = 1.0;
  EpImbalanceSource ep_imbalance_source = EpImbalanceSource::kNone;
  std::vector<partition::BlockCost> costs;        // per block, with the plan's recomputation
  std::vector<partition::BlockCost> plain_costs;  // per block, without recomputation

  // A collective over `ranks` ranks of `bytes` per rank: the profile's measured fit where it has one for that
  // group size (inside a node), else the ring formula over the link; over the inter-node link, NCCL's ring per GPU
  // of a node through its own NIC (HardwareProfile::spread_collective_s, ranks_per_node / tp of the group per node).
  double collective_s(partition::Collective op, double bytes, int ranks, const Link& link) const;
};
TermContext make_term_context(const run_plan::Plan& plan, const config::RunConfig& config, const PlanChoice& choice,
                              const HardwareProfile& profile, const SearchOptions& options, double core_sharing);

// Whether a plan's ranks compute a whole step without meeting a peer: no tp, cp or ep collective and no pipeline
// transfer inside a pass, no ZeRO-3 gather, and no per-micro-batch gradient reduction (ZeRO 0 and 1, ZeRO-2 per step
// or over one micro-batch): their only meetings are the step's gradient reduction and optimizer step. On a core
// shared with other work such a rank gets its fair share of the core for the whole step, while one that blocks
// every few milliseconds is woken ahead of the other work (HardwareProfile's stream_stretch, measure_sync_wait).
bool streams_the_step(const PlanChoice& choice, int zero, bool per_microbatch, double micro_batches);

// What sharing cores costs a plan with `ranks_on_node` ranks on the profile's cores_per_node, where they outnumber
// the cores and the profile measured time_sharing (partition::MeasuredCosts::TimeSharing; docs/planner.md, "More
// ranks than cores"): compute × `compute` beyond the ranks' share of the cores (the measured ratio over its ranks per
// core, at least 1, its excess scaled by how far the plan's ranks per core go toward the measured ones, whole
// beyond), and `handoff_s`, one handoff: the measured one to a peer on the same core whose holder spins (a
// descheduled peer waits out the holder's time slice), of which a collective waits collective_handoffs at
// `ranks_per_core`. {1, 0, 1} otherwise: priced as before.
struct TimeShared {
  double compute = 1.0, handoff_s = 0;
  double ranks_per_core = 1.0;  // the plan's ranks on the node over its cores, where they outnumber them; 1 otherwise
  double handoff_yield_s = 0;   // the measured handoff whose holder is itself waiting (polling with a yield)
};
TimeShared time_shared(const HardwareProfile& profile, int ranks_on_node);

// Bytes each rank sends in a ring collective of `bytes` per rank over n ranks: (n - 1) / n of it for a
// reduce-scatter or all-gather, twice that for an all-reduce.
double ring_bytes(double bytes, int n, bool all_reduce);

// --- Terms -------------------------------------------------------------------------------------------------

// Compute of one block, one micro-batch, on one rank's share of the tokens (÷ cp), before core sharing:
// measured tables, else the roofline of its kernels, else FLOPs over the profile's rate. `warm`: the fraction of
// the rank's working set in cache (measured tables only). input_grad_s excludes recompute_s, the forward rerun.
// The part of a block's compute (included in BlockCompute's F, I and rerun) that a run storing the [T, T]
// attention probabilities spends beyond memory-efficient attention (SearchOptions::attention): its passes'
// bytes (partition::attention_probabilities_work) over the profile's memory bandwidth, less the backward's
// S = Q·Kᵀ GEMM at its roofline (the stored probabilities replace it); the rerun repeats the forward passes
// under selective or full recomputation. With a named unfused kernel (HardwareProfile::attention_kernel) the scores,
// softmax and products are priced at its published rate instead (HardwareProfile::unfused_attention_seconds),
// dropout's bytes apart. Zero for memory_efficient and blocks without attention; roofline profiles only (a measured
// profile times the engine's own attention).
struct ProbabilitiesCompute {
  double forward_s = 0, input_grad_s = 0, recompute_s = 0;
  // Of those, the scores' streamed bytes over the bandwidth (elementwise) and the extra kernels' launches (the
  // unfused products and softmax, dropout, over the fused kernel's one in F and two in I); the rerun's equal F's.
  double stream_forward_s = 0, stream_input_grad_s = 0, launch_forward_s = 0, launch_input_grad_s = 0;
};
ProbabilitiesCompute attention_probabilities_compute(const TermContext& c, int block);

// One block's compute per pass. On a roofline profile each pass is its GEMMs + its elementwise traffic + its kernel
// launches (HardwareProfile::roofline_seconds); `elementwise` and `launch` hold the last two by pass, parts of the
// four totals (stage_costs moves them to the elementwise and kernel_launch terms). Zero on measured and rate profiles,
// whose figures include them.
struct PassSplit {
  double forward_s = 0, input_grad_s = 0, weight_grad_s = 0, recompute_s = 0;
  PassSplit& operator/=(double d);
};
struct BlockCompute {
  double forward_s = 0, input_grad_s = 0, weight_grad_s = 0, recompute_s = 0;
  ProbabilitiesCompute probabilities;  // already in the four above (÷ cp like them, but its launches)
  PassSplit elementwise, launch;       // already in the four above (elementwise ÷ cp; launch whole: a cp rank launches
                                       // every kernel on its T / cp rows)
  PassSplit cp_core;  // already in the four above: the cp attention core's work beyond its share (cp_core_compute),
                      // its streams and launches in elementwise and launch too
  double backward_input_s() const { return input_grad_s + recompute_s; }  // all of I
};
BlockCompute block_compute(const TermContext& c, int block, double warm);
// What block `block`'s cp attention core costs beyond one rank's core ÷ cp (partition::cp_core_work: ring's chunk
// pairs, merges, accumulations and copies; all_to_all's permutes), per pass: the extra streams over the profile's
// memory bandwidth (`elementwise`), the extra kernels × kernel_launch_s (`launch`), and on a roofline profile the
// core's products as launched (ring: each chunk pair's; all_to_all: heads / cp) less one rank's ÷ cp; totals in
// the four passes. Zero at cp 1 and for blocks without attention.
struct CpCoreCompute {
  PassSplit total, elementwise, launch;
};
CpCoreCompute cp_core_compute(const TermContext& c, int block);

// Host waits of routing on a GPU (step_terms_host_waits.cpp; docs/planner.md, "Host waits of routing on a GPU").
// What one host wait leaves the GPU idle: the stream drained, the host launches the next kernel with nothing queued
// to hide its launch call behind, 3.8 us (NVIDIA, A. Gray, "Getting Started with CUDA Graphs", 2019: a kernel
// launched on a stream costs the host 3.8 us on a V100; the CUDA profiles' kernel_launch_us source cites it), plus
// the profile's GPU-side launch gap (kernel_launch_s).
inline constexpr double kHostLaunchAfterWaitS = 3.8e-6;
// Seconds per host wait on a plan whose profile is a GPU's (device_type cuda) without measured block tables (a
// measured block holds its layer's waits); 0 otherwise (CPU plans: their host work is the compute itself).
double host_wait_s(const TermContext& c);
// A moe block's host waits per micro-batch and pass, as docs/cuda.md counts them: F 1 (the logits read back), + 2
// under ep (the wait before the count exchange, the counts' read-back), + 1 with a router bias (read back), + 3
// with the shared expert's gate; I 2 (the combine weights' gradient read back, the logits' gradient uploaded), + 1
// under cp with the balance loss, + 2 with the shared expert's gate; a full rerun F's again. Zeros for other blocks.
struct MoeHostWaits {
  int forward = 0, input_grad = 0, rerun = 0;
};
MoeHostWaits moe_host_waits(const TermContext& c, int block);
// Adds moe_host_waits × host_wait_s to each pass of `x` and to its launch split (idle GPU, whole under cp).
void add_moe_host_waits(const TermContext& c, int block, BlockCompute& x);
// The host's routing of a moe block per micro-batch (docs/planner.md, "The host's routing"): F, layers::route over
// the rank's b · T / cp tokens; I, route again and router_backward; a full rerun F's again; from the profile's
// `host_routing` fit (partition::MeasuredHostRouting, `cleave profile`; scaled by E over the fit's E when the
// profile timed another expert count). Zero for other blocks, on profiles without the fit, and wherever the block's
// time was measured on the real layer (a block table, or a rate profile's block rates), which holds it.
struct MoeHostRouting {
  double forward_s = 0, input_grad_s = 0, rerun_s = 0;
};
MoeHostRouting moe_host_routing(const TermContext& c, int block);
// Adds moe_host_routing to each pass of `x` and to its launch split (host time: whole under cp, the tokens already
// the rank's).
void add_moe_host_routing(const TermContext& c, int block, BlockCompute& x);
// The sigmoid router's bias update at the step's end (model.bias_update_rate > 0): 2 host waits per routed layer
// of the rank (engine/train/router_metrics.cpp move_bias: the bias read back, the synchronize after its upload),
// × host_wait_s; 0 for other routers, a rate of 0, and where host_wait_s is 0.
double router_bias_update_s(const TermContext& c, int routed_layers);

// A block's collectives per micro-batch: exposed in F and in I (the rerun forward's inside I apart), hidden
// under compute, and the bytes this rank sends per step.
struct BlockCollectives {
  double forward_s = 0, backward_s = 0, rerun_s = 0;
  double weight_grad_s = 0;  // in W (tp: sequence parallelism's all-gathers again, Qwen3's q/k norm gradients)
  double hidden_forward_s = 0, hidden_backward_s = 0, hidden_weight_s = 0;
  double bytes = 0;
  // The meetings with the group's peers per micro-batch (one per collective or ring hop), in F and in I (its rerun
  // included): each waits the profile's sync_wait_per_meeting (meeting_wait_s), exposed or hidden alike.
  double meetings_forward = 0, meetings_backward = 0, meetings_weight = 0;
  // The handoffs those meetings wait where ranks outnumber cores (collective_handoffs of each collective, summed).
  double handoffs_forward = 0, handoffs_backward = 0, handoffs_weight = 0;
};
// Tensor parallelism: the block's collectives per pass as partition::tp_block_comm lists what its layers post (a
// transformer block's 2 all-reduces of [micro, T/cp, D] in F and 2 in I, the vocab-parallel embedding's, lm head's and
// loss's, a moe block's combine-weight gradient and shared experts; sequence parallelism's reduce-scatters and
// all-gathers in their place, posted per sample, and its all-gathers again in W), on the intra-node link; a full
// rerun's F collectives again in I.
BlockCollectives tensor_parallel_collectives(const TermContext& c, int block);
// Megatron-Core's tp communication overlap (SearchOptions::overlap_tp_comm): each of a block's tp exchanges runs
// under the GEMMs of the same pass (Transformer Engine's userbuffers split the GEMM and the all-gather /
// reduce-scatter into chunks), so a pass's collectives hide under that pass's compute of the block, `compute` at the
// core sharing less what context parallelism's ring already hid there (`cp`): exposed = max(0, tp − free compute),
// in F, I (its rerun apart) and W.
// `tp` unchanged without the option.
BlockCollectives tensor_parallel_overlap(const TermContext& c, const BlockCollectives& tp, const BlockCompute& compute,
                                         const BlockCollectives& cp);
// Context parallelism: the key/value exchange of an attention layer (docs/planner.md, "Context parallelism");
// the ring hides each pass's K/V hops behind that pass's compute of the block (`compute`: ÷ cp, before core
// sharing): F's behind the forward, the backward's behind I without the rerun, a full rerun's behind the rerun.
BlockCollectives context_parallel_exchange(const TermContext& c, int block, const BlockCompute& compute);
// Expert parallelism (ep > 1, a block with routed experts; docs/planner.md, "Expert parallelism"): the four
// all-to-alls per micro-batch, dispatch and combine in F and their gradients in I (a full recompute reruns F's two
// in I), each of the busiest rank's rows, ep_imbalance × b × T/cp × k rows of D values (ep_all_to_all_s); none
// hidden under compute. Meetings (ep_meeting_wait_s): none where the all-to-all is priced on the point-to-point fit
// (a ping-pong's latency already holds waking the peer); else the combine in F (the dispatch runs right after the
// count exchange, whose meeting count_exchange prices), both gradients in I, the rerun's combine under full
// recomputation. Handoffs (ranks outnumbering cores): collective_handoffs for every all-to-all, at the yielding
// handoff (TermContext::ep_handoff_s). `bytes`: what a rank sends off-rank per step, on average
// (partition::ep_exchange_bytes). Zero for other blocks and at ep 1.
BlockCollectives expert_all_to_all(const TermContext& c, int block);
// One all-to-all whose busiest rank receives `busiest_bytes` (its own rows included) over ep ranks, as the engine
// runs it (every message of the exchange posted at once, mpi_collectives.cpp): inside a node on a profile with a
// measured point-to-point fit: where the profile timed the exchange itself over ep ranks at the model's sizes
// (MeasuredCosts::ep_exchange, measure_ep_exchange), its fit, α_x + busiest_bytes / β_x; else ep - 1 messages at the
// point-to-point latency α, (ep - 1) α + busiest_bytes / β_rs, the bytes at the
// slope β_rs of the profile's reduce-scatter fit over ep ranks (every rank sending and receiving at once, which a
// ping-pong does not measure; without that fit the ping-pong's, (ep - 1)(α + busiest_bytes / ep / β)); the collective
// fits' intercepts, fitted from 4 KiB up, are no measure of the few-KiB messages of a moe block (count_exchange's
// rule); else a reduce-scatter of those bytes over the ep link (TermContext::collective_s: the profile's fit, or the
// ring formula, the same figure on a link).
double ep_all_to_all_s(const TermContext& c, double busiest_bytes, int ep);
// The busiest ep rank's compute of a block with routed experts: its expert GEMMs (gate, up, down: 3 per pass,
// 2·T·k·D·F / tp FLOPs each per sample) run ep_imbalance × the mean rows, so each pass of `compute` (without the
// attention-probabilities part) grows by (ep_imbalance - 1) × the expert GEMMs' FLOP share of that pass (capped at
// 1); I's share applies to the rerun too. On a roofline profile (no measured tables), at ep > 1 or cp > 1, the
// rank's expert GEMMs are priced launch by launch instead (partition::moe_routed_expert_work: each of the E GEMMs
// per projection at ep_imbalance × b · T/cp · k / E rows, its SwiGLU's traffic, less block_compute's T-row price ÷ cp).
// `compute` itself otherwise: at ep 1 and cp 1, and for other blocks.
BlockCompute expert_imbalance_compute(const TermContext& c, int block, const BlockCompute& compute);
// The waits for peers' lost time at the meetings inside a block's passes (docs/planner.md, "Waits at meetings"): a
// pass in which the block meets its peers (any of `tp`, `cp`, `ep` nonzero in it, exposed or hidden) waits the
// profile's measured sync_wait_per_compute × the core sharing × that pass's compute (`compute`, the busiest ep rank's:
// F; I with its rerun, and W too when the schedule fuses it into B, the next meeting coming after it). Returned as
// the term of the block's last meeting in the pass: ep's all-to-alls, else cp's exchange, else tp's collectives
// (`into`: which of the three, per pass). Zero without the measurement (older profiles, the shipped ones).
// What the block's count exchanges already waited (`counts`, below: the compute before them) is left out here.
struct SyncWait {
  StepTerm forward_term = StepTerm::kExpertAllToAll, backward_term = StepTerm::kExpertAllToAll;
  double forward_s = 0, backward_s = 0;
};
struct CountExchange;
// The per-meeting part of those waits: the profile's sync_wait_per_meeting × `meetings` (not scaled by the core
// sharing: it is no compute), plus `handoffs` handoffs to a time-shared peer (TermContext::handoff_s; the meetings'
// collective_handoffs). Zero without the measurements (older profiles, the shipped ones).
double meeting_wait_s(const TermContext& c, double meetings, double handoffs);
// The same for expert parallelism's exchanges (its all-to-alls and count exchange): the per-meeting wait × `meetings`
// and `handoffs` yielding handoffs (TermContext::ep_handoff_s). What an exchange's own time holds where ranks
// outnumber cores is measured (router log, the last rank to arrive) at a few tens of us per handoff, the yielding
// kind: when the last rank arrives every peer is polling with a yield; a peer's core held by a computing rank is a
// wait for that rank's compute, not the exchange's own time (docs/planner.md, "Expert parallelism").
double ep_meeting_wait_s(const TermContext& c, double meetings, double handoffs);
// What one collective `e` over `ranks` ranks waits for time-shared peers: handoff_s × collective_handoffs at the
// plan's ranks per core (collective_handoffs.hpp). Zero where ranks do not outnumber cores or it was not measured.
double handoff_wait_s(const TermContext& c, Exchange e, int ranks);
SyncWait peer_sync_wait(const TermContext& c, const BlockCompute& compute, const BlockCollectives& tp,
                        const BlockCollectives& cp, const BlockCollectives& ep, const CountExchange& counts);
// Expert parallelism's count exchange (ep > 1, a block with routed experts; docs/planner.md, "Waits at meetings"):
// before each dispatch the ep ranks exchange their routed-row counts per expert (layers/moe/expert_dispatch.cpp,
// plan_dispatch: an all-to-all of E int64 per rank), once per micro-batch in F and again in I's forward rerun under
// full recomputation. Its latency inside a node is the profile's measured count exchange (count_exchange over its
// ranks, × (ep - 1) / (ranks - 1) at another ep) and one meeting's wait (ep_meeting_wait_s: its handoffs the
// yielding kind); from a profile without it, ep - 1 messages of 8·E / ep bytes, (ep - 1)(α + 8·E / ep / β), on
// the profile's measured point-to-point fit inside a node, else the ring price of a reduce-scatter of 8·E bytes
// over the ep link (the same figure); as a meeting it is where the pass's compute before it is waited for: the
// profile's sync_wait_per_compute × the core sharing × the block's F less the expert GEMMs' FLOP share of its
// attention-probabilities-free part (expert_gemm_fraction; the same on every ep rank: `compute`, the mean rows'),
// the rerun's likewise; the expert GEMMs' wait stays at the combine (peer_sync_wait). Zero at ep 1 and for blocks
// without routed experts; the wait zero without the measurement.
struct CountExchange {
  double forward_s = 0, rerun_s = 0;            // the exchanges' own time per micro-batch
  double wait_forward_s = 0, wait_rerun_s = 0;  // the meeting's wait per micro-batch
  double bytes = 0;                             // sent off-rank per step
};
CountExchange expert_count_exchange(const TermContext& c, int block, const BlockCompute& compute);
// One moe block's exchanges per micro-batch split as PlanEstimate reports them (EpExchangePrice): `ep` and `counts`
// its all-to-alls and count exchange, `meet` its peer_sync_wait (its ep terms only), `even` and `busiest` its
// compute at the mean and the busiest rank's rows (block_compute, expert_imbalance_compute). Zeros at ep 1.
EpExchangePrice ep_exchange_price(const TermContext& c, const BlockCollectives& ep, const CountExchange& counts,
                                  const SyncWait& meet, const BlockCompute& even, const BlockCompute& busiest);
// Of a pass of `pass_flops` FLOPs of a block with routed experts, the share in its expert GEMMs (gate, up, down:
// 3 per pass, 2·T·k·D·F / tp FLOPs each per sample), capped at 1; 0 for other blocks.
double expert_gemm_fraction(const TermContext& c, int block, double pass_flops);
// The parameter elements one tp rank of a block holds, reduces and updates: the block's, less the (ep - 1) / ep of
// its routed experts that live on the other ranks of its ep group.
double block_local_params(const TermContext& c, int block);
// Of those, the routed experts that are reduced and ZeRO-sharded over the expert-dp group: the block's E / ep
// experts (one tp rank's) under ep > 1, else 0 (at ep 1 the experts go with the rest, over the replicas).
double block_expert_params(const TermContext& c, int block);

// ZeRO-3's all-gather of one block's parameters (one tp rank's, in the compute dtype) from the replicas; under ep its
// routed experts from the expert-dp group (a unit of their own, gathered after the rest).
double zero3_block_gather_s(const TermContext& c, int block);
// A stage's ZeRO-3 gathers per micro-batch: each block's gather prefetched under the compute of the block before
// it in the pass (forward first to last, backward last to first), a pass's first in full. `block_forward` /
// `block_backward`: per block, the seconds of its F / backward (I, and W in a fused B) at the core sharing that
// are free to hide a prefetch (what context parallelism's ring hops did not already hide under).
struct StageGathers {
  double forward_s = 0, backward_s = 0, hidden_forward_s = 0, hidden_backward_s = 0;
};
StageGathers zero3_stage_gathers(const TermContext& c, const std::vector<double>& gathers,
                                 const std::vector<double>& block_forward, const std::vector<double>& block_backward);

// The stage's gradient reduction over the replicas (ZeRO 0: all-reduce; 1-3: reduce-scatter) in REDUCE_GRAD,
// ZeRO-1/2's all-gather of the updated parameters after the optimizer step, and, reducing per micro-batch, what
// each W action cannot hide of the earlier reductions (`w_free`: the seconds of the stage's W compute, at the core
// sharing, not already hiding ZeRO-3's prefetch).
struct GradientReduction {
  double reduce_s = 0, step_gather_s = 0;
  double per_w_exposed_s = 0, per_w_hidden_s = 0;
  double bytes = 0;
};
GradientReduction gradient_reduction(const TermContext& c, double grad_bytes, double w_free);
// ZeRO-2 per micro-batch where the ranks outnumber the cores and the profile measured time_sharing (handoff_s > 0):
// `whole` (gradient_reduction's) repriced bucket by bucket as the engine reduces it (microbatch_buckets.hpp): each
// bucket a meeting with its own handoffs, in REDUCE_GRAD and per earlier micro-batch, where bucket j hides behind the
// W of bucket j + 1's blocks (`block_bytes`, forward order, the tied head left out; `table_bytes` a tied table's own
// bucket, 0 without), nothing before the table's, the last behind the next W (`w_free`). `whole` unchanged otherwise.
GradientReduction zero2_bucket_reduction(const TermContext& c, const GradientReduction& whole,
                                         const std::vector<double>& block_bytes, double table_bytes, double w_free);
// ZeRO-2 per micro-batch where zero2_bucket_reduction prices it bucket by bucket (ranks outnumber cores, time_sharing
// measured) over more than one micro-batch, on a plan whose passes meet no other peer (pp 1, no tp, cp or ep): each
// micro-batch's settle inside B is a blocking meeting of the replicas, which waits for what the peers lost computing
// since the previous settle, the profile's sync_wait_per_compute × `microbatch_compute_s` (the stage's F, I with its
// rerun, and W of one micro-batch, at the core sharing). Seconds per micro-batch, priced in W's data_parallel term;
// 0 elsewhere and without the measurement (docs/planner.md, "More ranks than cores").
double zero2_settle_wait_s(const TermContext& c, double microbatch_compute_s);
// Expert parallelism: the stage's routed-expert gradients (`grad_bytes`, the rank's E / ep experts) reduced over the
// expert-dp group (dp x cp / ep ranks: reduce-scatter under ZeRO, all-reduce without), once per step whatever
// optimizer.zero_reduce says, after the other buckets; ZeRO-1/2 all-gather the updated experts over it.
GradientReduction expert_gradient_reduction(const TermContext& c, double grad_bytes);

// Transfers overlapped with a pass over a stage's blocks (SearchOptions::overlap_grad_reduce; Megatron-LM's
// --overlap-grad-reduce / --overlap-param-gather, FSDP), one transfer per block (the block's share of the stage's
// collective, by its gradient bytes), run one after another on the communication stream:
//  - overlapped_reduction_s: block k's reduction starts when the backward has passed block k (`compute`, in backward
//    order) and the transfer before it is done; exposed = when the last transfer ends − when the backward ends.
//  - overlapped_gather_s: block k's gather must end before block k's forward starts (`compute` in forward order);
//    the gathers start with the forward; exposed = when the last block's forward ends − the compute alone.
// Reducing per micro-batch, the last micro-batch's reduction (REDUCE_GRAD's) is the one overlapped here; the earlier
// ones hide behind W as before. Both return what is exposed (≤ the sum of `transfer`, ≥ the last transfer for a
// reduction and the first for a gather); the rest is hidden.
double overlapped_reduction_s(const std::vector<double>& transfer, const std::vector<double>& compute);
double overlapped_gather_s(const std::vector<double>& transfer, const std::vector<double>& compute);

// The optimizer step of `local_params` parameters (the busiest rank's), ZeRO-sharded, at the core sharing: the
// `expert_params` among them (routed experts under ep > 1) sharded over the expert-dp group, the rest over the
// replicas.
double optimizer_step_s(const TermContext& c, double local_params, double expert_params = 0);

// --- Assembly ----------------------------------------------------------------------------------------------

// Expert parallelism's meetings per micro-batch: its all-to-alls (dispatch, combine in F; their gradients, and under
// full recomputation the rerun's two, in I) and count exchanges (F; the rerun's in I).
struct EpMeetings {
  double all_to_alls_forward = 0, all_to_alls_backward = 0, counts_forward = 0, counts_backward = 0;
  int blocks = 0;  // the stage's blocks with routed experts under ep
};
// Tensor and context parallelism's meetings per micro-batch, counted in the peers each waits for (a tp collective or
// cp all-to-all: the group less the rank; a cp ring hop: the neighbour it receives from), per pass (F; I with the
// rerun's): where ranks outnumber cores each such peer may be behind a computing core holder (add_group_core_holder_waits).
struct GroupPeers {
  double tp_forward = 0, tp_backward = 0, cp_forward = 0, cp_backward = 0;
};
// One stage's actions, term by term, per micro-batch (F, I, W) or per step (REDUCE_GRAD).
struct StageCosts {
  ActionTerms forward, input_grad, weight_grad, reduce_grad;
  double step_gather_s = 0;   // ZeRO-1/2, after the optimizer step (exposed)
  double step_gather_hidden_s = 0;  // of it, what overlaps the next step's forward (--overlap-grad-reduce)
  double output_bytes = 0;    // the boundary tensor sent per micro-batch (1/tp of it with scatter/gather)
  double comm_bytes = 0;      // sent per step by a rank of the stage
  double params = 0;          // parameter elements of one tp rank
  double expert_params = 0;   // of them, routed experts reduced and sharded over the expert-dp group (ep > 1)
  std::vector<BlockPassSeconds> blocks;  // compute per block kind, per micro-batch, at the core sharing
  EpExchangePrice ep_exchange;           // the stage's first moe block under ep (ep_exchange_price); zeros otherwise
  // Per micro-batch, the meetings of the stage's passes: where a computing rank gives its core up (every tp and cp
  // collective or ring hop, ep's all-to-alls and count exchanges), and of them ep's, per pass (the rerun's in I).
  double meetings = 0;
  EpMeetings ep_meetings;
  GroupPeers group_peers;
};
// Every stage's costs; `working_set` per pp rank (bytes touched over a step) picks the warm or cold tables.
std::vector<StageCosts> stage_costs(const TermContext& c, const std::vector<std::int64_t>& working_set);

// The pipeline's transfers as two-rank meetings (docs/planner.md, "Waits at meetings"): the receiver of a stage's
// activation (its F's) or input gradient (its I's, or B's) waits for what the sender lost computing it, the profile's
// sync_wait_per_compute × that pass's compute on the stage at the core sharing (F; I with its rerun, plus W when
// the schedule fuses it into B). Per stage, added to the transfer's time in the simulator (only transfers to
// another rank take it); step_breakdown reports it as point_to_point_wait. Zeros without the measurement.
struct SendWait {
  double forward_s = 0, backward_s = 0;
};
std::vector<SendWait> point_to_point_sync_wait(const TermContext& c, const std::vector<StageCosts>& stages);
// A pass's compute on the stage, at the core sharing: its GEMMs, traffic and launches (forward, input_grad,
// weight_grad, recompute, elementwise, kernel_launch terms).
double pass_compute_s(const ActionTerms& a);

// More ranks than cores, the pipeline's transfers (step_terms_core_holder.cpp; docs/planner.md, "More ranks than
// cores"): a receiver whose tensor arrives is not running with probability 1 - 1/ρ (ρ = `ranks_per_core`) and then
// waits for the core's holder to end its action, half of `holder_action_s` on average:
// (1 - 1/ρ) × holder_action_s / 2; 0 at ρ <= 1. point_to_point_sync_wait adds it to every transfer's wait.
double core_holder_wait_s(double ranks_per_core, double holder_action_s);
// The holder's action: the pipeline's mean F, I, W (or F, B where the schedule fuses them) per stage and micro-batch,
// on a whole core (the priced compute over the ranks' share of the cores, TermContext::core_sharing without the
// stretch).
double pipeline_mean_action_s(const TermContext& c, const std::vector<StageCosts>& stages);
// More ranks than cores, ep's meetings (step_terms_core_holder.cpp; docs/planner.md, "More ranks than cores"): a rank
// at an all-to-all or count exchange needs each of its ep - 1 peers on a core; each is not running with probability
// 1 - 1/ρ and then waits for its core's holder, a rank computing until its next meeting, to end that action: per
// meeting (ep - 1) × core_holder_wait_s(ρ, the mean action between meetings), the peers taken one after another as
// collective_handoffs takes them. The holder's action: the stages' compute per micro-batch on a whole core over their
// meetings (StageCosts::meetings, and a pipeline's actions where pp > 1). 0 unless the ranks outnumber the cores.
double ep_core_holder_wait_s(const TermContext& c, const std::vector<StageCosts>& stages);
// Adds ep_core_holder_wait_s per meeting to each stage's expert_all_to_all (the all-to-alls) and count_exchange
// terms, and to its ep_exchange's own time (meetings_s, count_exchange_s: one block's). Nothing where it is 0.
void add_ep_core_holder_waits(const TermContext& c, std::vector<StageCosts>& stages);
// More ranks than cores, one peer of a meeting (step_terms_core_holder.cpp; docs/planner.md, "More ranks than
// cores"): core_holder_wait_s(ρ, the mean action between meetings), the holder's action as ep_core_holder_wait_s takes
// it; ep_core_holder_wait_s is (ep - 1) of these. 0 unless the ranks outnumber the cores.
double peer_core_holder_wait_s(const TermContext& c, const std::vector<StageCosts>& stages);
// Tensor and context parallelism's meetings over more ranks than cores: each peer a tp collective, cp all-to-all or
// ring hop waits for (StageCosts::group_peers) adds peer_core_holder_wait_s to the stage's tensor_parallel or
// context_parallel term, in F or I, exposed (the ring's hops hide their bytes, not a peer's absence from a core).
// Nothing where it is 0, or without tp and cp.
void add_group_core_holder_waits(const TermContext& c, std::vector<StageCosts>& stages);

// The simulator's inputs from the stage costs: F, I, W, REDUCE_GRAD per stage, the optimizer step (and the
// busiest rank's ZeRO-1/2 gather), the boundary link. `optimizer` receives that step's terms.
pipeline::SimulationCosts simulation_costs(const TermContext& c, const std::vector<StageCosts>& stages,
                                           ActionTerms& optimizer);

// The step a simulated timeline prices: its makespan (every rank synchronised before the optimizer step), or with
// SearchOptions::optimizer_post_validation its longest per-rank span (consecutive steps overlap).
double priced_step_s(const pipeline::TimelineStats& stats, const SearchOptions& options);

// The breakdown of a simulated step: the busiest rank's actions term by term; its idle time split into what a
// second simulation with free P2P removes (point_to_point) and the rest (bubble). `prepared` (optional): the plan's
// schedule prepared for the simulator (the same timing, without validating it again).
StepBreakdown step_breakdown(const TermContext& c, const std::vector<StageCosts>& stages, const ActionTerms& optimizer,
                             const pipeline::SimulationCosts& sim, const pipeline::SimulationResult& result,
                             const pipeline::PreparedSchedule* prepared = nullptr);

}  // namespace cleave::planner
