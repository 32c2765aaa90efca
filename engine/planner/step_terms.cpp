// See step_terms.hpp. The formulas are in docs/planner.md, "The step, term by term".
#include "engine/planner/step_terms.hpp"

#include <algorithm>

#include "engine/core/enum_names.hpp"
#include "partition/block_work.hpp"
#include "partition/cp_rules.hpp"
#include "partition/ep_costs.hpp"
#include "partition/measured_costs.hpp"
#include "partition/tp_rules.hpp"

namespace cleave::planner {

using partition::Collective;
using partition::Recompute;

double ring_bytes(double bytes, int n, bool all_reduce) {
  return n <= 1 ? 0.0 : (all_reduce ? 2.0 : 1.0) * (n - 1) / n * bytes;
}

double TermContext::collective_s(Collective op, double bytes, int ranks, const Link& link) const {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  if (const partition::AlphaBeta* fit = profile->measured.collective(op, ranks);
      fit != nullptr && &link == &profile->intra_node) {
    return fit->seconds(bytes);
  }
  if (&link == &profile->inter_node) {  // dp / cp groups have stride tp: ranks_per_node / tp of them on a node
    return profile->spread_collective_s(bytes, ranks, std::max(1, profile->ranks_per_node / choice->tp),
                                        op == Collective::kAllReduce);
  }
  return op == Collective::kAllReduce ? link.all_reduce_s(bytes, ranks) : link.all_reduce_s(bytes, ranks) / 2;
}

TermContext make_term_context(const run_plan::Plan& plan, const config::RunConfig& config, const PlanChoice& choice,
                              const HardwareProfile& profile, const SearchOptions& options, double core_sharing) {
  TermContext c;
  c.plan = &plan;
  c.config = &config;
  c.choice = &choice;
  c.profile = &profile;
  c.options = &options;
  c.bf16 = config.device.precision == config::Precision::kBf16;
  c.dtype = c.bf16 ? DType::kBF16 : DType::kF32;
  c.act_bytes = static_cast<double>(dtype_size(c.dtype));
  c.micro = static_cast<double>(choice.micro_batch);
  c.micro_batches = static_cast<double>(config.resolved_batch().gradient_accumulation_steps);
  c.replicas = choice.dp * choice.cp;
  c.expert_replicas = c.replicas / std::max(1, choice.ep);
  c.zero = c.replicas > 1 ? config.optimizer.zero_stage : 0;
  c.per_microbatch = c.zero >= 2 && config::resolved_zero_reduce(config) == config::ZeroReduce::kPerMicrobatch;
  for (const auto& rank : plan.schedule.ranks) {
    for (const auto& a : rank) c.fused_backward = c.fused_backward || a.kind == pipeline::ActionKind::kBackward;
  }
  c.core_sharing = core_sharing;
  c.one_node = options.world <= profile.ranks_per_node;
  c.p2p_link = options.world > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  // Gradients are reduced over dp × cp ranks (ZeRO shards over them too): the replicas the tail sees.
  c.dp_link = choice.tp * choice.cp * choice.dp > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  c.cp_link = choice.tp * choice.cp > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  c.ep_link = choice.tp * choice.ep > profile.ranks_per_node ? &profile.inter_node : &profile.intra_node;
  c.ep_imbalance = choice.ep == 1                ? 1.0
                   : options.ep_imbalance > 0 ? options.ep_imbalance
                                              : partition::workload_ep_imbalance(plan.spec, choice.micro_batch, choice.cp, choice.ep);
  c.costs = partition::model_costs(plan.spec, c.dtype, choice.recompute);
  c.plain_costs = partition::model_costs(plan.spec, c.dtype, Recompute::kNone);
  return c;
}

// --- Terms -------------------------------------------------------------------------------------------------

PassSplit& PassSplit::operator/=(double d) {
  forward_s /= d;
  input_grad_s /= d;
  weight_grad_s /= d;
  recompute_s /= d;
  return *this;
}

ProbabilitiesCompute attention_probabilities_compute(const TermContext& c, int b) {
  ProbabilitiesCompute x;
  if (c.options->attention == partition::AttentionKind::kMemoryEfficient || !c.profile->has_roofline()) return x;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  const partition::ProbabilitiesWork w =
      partition::attention_probabilities_work(block, c.dtype, c.options->attention, c.choice->tp, c.choice->micro_batch);
  if (w.elements <= 0) return x;
  const HardwareProfile& profile = *c.profile;
  const double bandwidth = profile.memory_bandwidth_Bps;
  const auto gemm_s = [&](const partition::PassWork& p) { return profile.gemm_pass_seconds(p, c.bf16); };
  const auto launch_s = [&](const partition::PassWork& p) { return profile.launch_seconds(p); };
  if (!profile.attention_kernel.empty()) {
    // The named kernel's published rate prices the products, softmax and their launches together; dropout (not in
    // the benchmark) keeps its bytes and kernel (docs/planner.md, "Attention kernels by pass").
    const auto [core_forward_s, core_backward_s] = profile.unfused_attention_seconds(w, c.bf16);
    x.stream_forward_s = w.dropout_forward.stream_bytes / bandwidth;
    x.stream_input_grad_s = w.dropout_backward.stream_bytes / bandwidth;
    x.launch_forward_s = launch_s(w.dropout_forward) - launch_s(w.replaced_forward);
    x.launch_input_grad_s = launch_s(w.dropout_backward) - launch_s(w.replaced_backward);
    x.forward_s = x.stream_forward_s + x.launch_forward_s + core_forward_s - gemm_s(w.replaced_forward);
    x.input_grad_s = x.stream_input_grad_s + x.launch_input_grad_s + core_backward_s - gemm_s(w.replaced_backward);
    x.recompute_s = c.choice->recompute == Recompute::kNone ? 0.0 : x.forward_s;
    return x;
  }
  x.stream_forward_s = w.forward_bytes / bandwidth;
  x.stream_input_grad_s = w.backward_bytes / bandwidth;
  x.launch_forward_s = launch_s(w.stored_forward) - launch_s(w.replaced_forward);
  x.launch_input_grad_s = launch_s(w.stored_backward) - launch_s(w.replaced_backward);
  x.forward_s = x.stream_forward_s + x.launch_forward_s + gemm_s(w.stored_forward) - gemm_s(w.replaced_forward);
  x.input_grad_s = x.stream_input_grad_s + x.launch_input_grad_s + gemm_s(w.stored_backward) - gemm_s(w.replaced_backward);
  x.recompute_s = c.choice->recompute == Recompute::kNone ? 0.0 : x.forward_s;
  return x;
}

BlockCompute block_compute(const TermContext& c, int b, double warm) {
  const PlanChoice& choice = *c.choice;
  const HardwareProfile& profile = *c.profile;
  const partition::MeasuredCosts& measured = profile.measured;
  const auto& cost = c.costs[static_cast<std::size_t>(b)];
  const auto& plain = c.plain_costs[static_cast<std::size_t>(b)];
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  BlockCompute x;
  if (measured.has_blocks()) {
    const partition::BlockTimes t = measured.block_times(block, choice.tp, choice.micro_batch, profile.name, warm);
    // Recomputation reruns part of the forward inside I: its share of the measured forward time.
    const double rerun = plain.forward_flops > 0 ? (cost.input_grad_flops - plain.input_grad_flops) / plain.forward_flops : 0.0;
    x.forward_s = t.forward_s;
    x.input_grad_s = t.input_grad_s;
    x.recompute_s = std::max(0.0, rerun) * t.forward_s;
    x.weight_grad_s = t.weight_grad_s;
  } else if (profile.has_roofline()) {  // a shipped profile: kernel by kernel
    const bool sp = choice.sequence_parallel;
    partition::BlockWork work = partition::block_work(block, c.dtype, choice.recompute, choice.tp, choice.micro_batch, sp);
    // The rerun's kernels are appended to input_grad's, and the roofline prices kernel by kernel: the difference
    // from the plain input gradient is the rerun's own cost, part by part.
    partition::PassWork plain_input =
        choice.recompute == Recompute::kNone
            ? work.input_grad
            : partition::block_work(block, c.dtype, Recompute::kNone, choice.tp, choice.micro_batch, sp).input_grad;
    // The run's own kernels beyond the engine's (SearchOptions::run_kernels): streamed bytes and launches only.
    if (c.options->run_kernels.any()) {
      const partition::RunKernels& run = c.options->run_kernels;
      const partition::BlockWork extra = partition::run_kernels_work(block, c.dtype, run, choice.recompute, choice.tp, choice.micro_batch, sp);
      work.forward += extra.forward;
      work.input_grad += extra.input_grad;
      work.weight_grad += extra.weight_grad;
      if (choice.recompute == Recompute::kNone) {
        plain_input = work.input_grad;
      } else {
        plain_input += partition::run_kernels_work(block, c.dtype, run, Recompute::kNone, choice.tp, choice.micro_batch, sp).input_grad;
      }
    }
    x.forward_s = profile.roofline_seconds(work.forward, c.bf16);
    x.input_grad_s = profile.roofline_seconds(plain_input, c.bf16);
    x.recompute_s = profile.roofline_seconds(work.input_grad, c.bf16) - x.input_grad_s;
    x.weight_grad_s = profile.roofline_seconds(work.weight_grad, c.bf16);
    x.elementwise = {profile.elementwise_seconds(work.forward), profile.elementwise_seconds(plain_input),
                     profile.elementwise_seconds(work.weight_grad),
                     profile.elementwise_seconds(work.input_grad) - profile.elementwise_seconds(plain_input)};
    x.launch = {profile.launch_seconds(work.forward), profile.launch_seconds(plain_input),
                profile.launch_seconds(work.weight_grad),
                profile.launch_seconds(work.input_grad) - profile.launch_seconds(plain_input)};
    x.probabilities = attention_probabilities_compute(c, b);
    const ProbabilitiesCompute& p = x.probabilities;
    const bool rerun = choice.recompute != Recompute::kNone;
    x.forward_s += p.forward_s;
    x.input_grad_s += p.input_grad_s;
    x.recompute_s += p.recompute_s;
    x.elementwise.forward_s += p.stream_forward_s;
    x.elementwise.input_grad_s += p.stream_input_grad_s;
    x.elementwise.recompute_s += rerun ? p.stream_forward_s : 0.0;
    x.launch.forward_s += p.launch_forward_s;
    x.launch.input_grad_s += p.launch_input_grad_s;
    x.launch.recompute_s += rerun ? p.launch_forward_s : 0.0;
  } else {
    const bool rates = !c.bf16 && profile.block_forward_flops > 0;
    const double flops = profile.flops(c.bf16);
    const double per_flop = c.micro / choice.tp;
    x.forward_s = cost.forward_flops * per_flop / (rates ? profile.block_forward_flops : flops);
    const double input_rate = rates ? profile.block_input_grad_flops : flops;
    x.input_grad_s = plain.input_grad_flops * per_flop / input_rate;
    x.recompute_s = (cost.input_grad_flops - plain.input_grad_flops) * per_flop / input_rate;
    x.weight_grad_s = cost.weight_grad_flops * per_flop / (rates ? profile.block_weight_grad_flops : flops);
  }
  if (choice.cp > 1) {  // each cp rank computes its T / cp tokens (ring's chunk pairs balance the causal work)
    x.forward_s /= choice.cp;
    x.input_grad_s /= choice.cp;
    x.recompute_s /= choice.cp;
    x.weight_grad_s /= choice.cp;
    x.probabilities.forward_s /= choice.cp;
    x.probabilities.input_grad_s /= choice.cp;
    x.probabilities.recompute_s /= choice.cp;
    x.elementwise /= choice.cp;
    x.launch /= choice.cp;
  }
  return x;
}

BlockCollectives tensor_parallel_collectives(const TermContext& c, int b) {
  const PlanChoice& choice = *c.choice;
  const auto& spec = c.plan->spec;
  BlockCollectives x;
  if (choice.tp <= 1 || !partition::is_language_model(spec.type)) return x;
  const auto& block = spec.blocks[static_cast<std::size_t>(b)];
  const auto sizes = spec.token_sizes();
  const double activation = c.micro * static_cast<double>(sizes.seq_len / choice.cp * sizes.d_model) * c.act_bytes;
  const Link& link = c.profile->intra_node;
  // One tp all-reduce of [micro, T, D]; under sequence parallelism a reduce-scatter and an all-gather of the same
  // tensor take its place (the same bytes on the wire).
  const double exchange = choice.sequence_parallel
                              ? c.collective_s(Collective::kReduceScatter, activation, choice.tp, link) +
                                    c.collective_s(Collective::kAllGather, activation, choice.tp, link)
                              : c.collective_s(Collective::kAllReduce, activation, choice.tp, link);
  double exchanges = 0;
  if (partition::is_repeated_layer(block.kind)) {
    x.forward_s = 2 * exchange;
    x.backward_s = 2 * exchange;
    // Full recomputation reruns the forward, its two exchanges included, inside I.
    const bool full = choice.recompute == Recompute::kFull;
    x.rerun_s = full ? 2 * exchange : 0.0;
    exchanges = full ? 6 : 4;
  } else if (block.kind == partition::BlockKind::kEmbedding) {
    x.forward_s = exchange;
    exchanges = 1;
  }
  x.bytes = c.micro_batches * exchanges * ring_bytes(activation, choice.tp, true);
  return x;
}

BlockCollectives tensor_parallel_overlap(const TermContext& c, const BlockCollectives& tp, const BlockCompute& compute,
                                         const BlockCollectives& cp) {
  if (!c.options->overlap_tp_comm) return tp;
  BlockCollectives x = tp;
  // A second of compute hides one transfer: what the ring's hops took of the pass is not free.
  const double free_f = std::max(0.0, c.core_sharing * compute.forward_s - cp.hidden_forward_s);
  const double free_i = std::max(0.0, c.core_sharing * compute.input_grad_s -
                                          std::max(0.0, cp.hidden_backward_s - c.core_sharing * compute.recompute_s));
  const double free_r = c.core_sharing * compute.recompute_s;
  x.forward_s = std::max(0.0, tp.forward_s - free_f);
  x.backward_s = std::max(0.0, tp.backward_s - free_i);
  x.rerun_s = std::max(0.0, tp.rerun_s - free_r);
  x.hidden_forward_s = tp.forward_s - x.forward_s;
  x.hidden_backward_s = (tp.backward_s - x.backward_s) + (tp.rerun_s - x.rerun_s);
  return x;
}

// The exchange of keys and values, with unit = one [micro, T/cp, D/tp] activation:
//  - all_to_all: q, k, v there and the output back in the forward, dout there and dq, dk, dv back in the
//    backward (4 all-to-alls each way); (cp-1)/cp of each leaves the rank, priced as a reduce-scatter of the same
//    bytes from the profile's fits; nothing overlaps (attention waits for its heads).
//  - ring: cp-1 hops of K and V (2 units) in the forward, each in flight while the layer's blocks of the step
//    before compute, so only what the compute cannot hide is exposed; the backward's K/V hops overlap its
//    compute the same way, the cp hops of dK, dV do not (each waits for the blocks that add to it).
BlockCollectives context_parallel_exchange(const TermContext& c, int b, const BlockCompute& compute) {
  const PlanChoice& choice = *c.choice;
  const auto& spec = c.plan->spec;
  BlockCollectives x;
  if (choice.cp <= 1 || !partition::is_repeated_layer(spec.blocks[static_cast<std::size_t>(b)].kind)) return x;
  const auto sizes = spec.token_sizes();
  const double unit = c.micro * static_cast<double>(sizes.seq_len / choice.cp) *
                      static_cast<double>(sizes.d_model / choice.tp) * c.act_bytes;
  const bool full = choice.recompute == Recompute::kFull;  // the rerun forward exchanges again inside I
  if (choice.cp_comm == config::ContextParallelComm::kAllToAll) {
    x.forward_s = 4 * c.collective_s(Collective::kReduceScatter, unit, choice.cp, *c.cp_link);
    x.backward_s = x.forward_s;
    x.rerun_s = full ? x.forward_s : 0.0;
    x.bytes = c.micro_batches * 8 * unit * (choice.cp - 1) / choice.cp;
    return x;
  }
  const Link& link = *c.cp_link;
  const double hop = link.latency_s + 2 * unit / link.bandwidth_Bps;
  const double hops = choice.cp - 1;
  // Each pass's K/V hops hide under that pass's own compute: F's under the forward, the rerun forward's under the
  // rerun, the backward's under the rest of I (a second of compute hides one transfer).
  const double by_forward = c.core_sharing * compute.forward_s, by_backward = c.core_sharing * compute.input_grad_s;
  const double by_rerun = c.core_sharing * compute.recompute_s;
  x.forward_s = std::max(0.0, hops * hop - by_forward);
  x.backward_s = std::max(0.0, hops * hop - by_backward) + choice.cp * hop;
  x.rerun_s = full ? std::max(0.0, hops * hop - by_rerun) : 0.0;
  x.hidden_forward_s = std::min(hops * hop, by_forward);
  x.hidden_backward_s = std::min(hops * hop, by_backward) + (full ? std::min(hops * hop, by_rerun) : 0.0);
  x.bytes = c.micro_batches * (2 * hops + choice.cp) * 2 * unit;
  return x;
}

namespace {

bool has_expert_parallelism(const TermContext& c, int b) {
  return c.choice->ep > 1 && c.plan->spec.blocks[static_cast<std::size_t>(b)].n_experts > 0;
}

}  // namespace

BlockCollectives expert_all_to_all(const TermContext& c, int b) {
  BlockCollectives x;
  if (!has_expert_parallelism(c, b)) return x;
  const PlanChoice& choice = *c.choice;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  const partition::EpExchangeBytes bytes =
      partition::ep_exchange_bytes(block, c.dtype, c.micro, choice.cp, choice.ep, c.ep_imbalance);
  const double pair = 2 * c.collective_s(Collective::kReduceScatter, bytes.busiest, choice.ep, *c.ep_link);
  x.forward_s = pair;   // dispatch and combine
  x.backward_s = pair;  // their gradients
  x.rerun_s = choice.recompute == Recompute::kFull ? pair : 0.0;
  x.bytes = c.micro_batches * 4 * bytes.sent_mean;
  return x;
}

BlockCompute expert_imbalance_compute(const TermContext& c, int b, const BlockCompute& compute) {
  if (!has_expert_parallelism(c, b)) return compute;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  const auto& cost = c.costs[static_cast<std::size_t>(b)];
  // Expert GEMMs per sample: gate, up (D -> F/tp) and down (F/tp -> D) over T·k rows, 2 FLOPs a multiply-add, the
  // same count in each pass (input gradient: dx of each; weight gradient: dW of each).
  const double expert_flops = 3.0 * 2.0 * static_cast<double>(block.seq_len * block.top_k * block.in_features) *
                              static_cast<double>(block.d_ff);
  const auto share = [&](double pass_flops) {
    return pass_flops > 0 ? (c.ep_imbalance - 1.0) * std::min(1.0, expert_flops / pass_flops) : 0.0;
  };
  const double f = share(cost.forward_flops), i = share(cost.input_grad_flops), w = share(cost.weight_grad_flops);
  const ProbabilitiesCompute& p = compute.probabilities;
  BlockCompute x = compute;
  x.forward_s += f * (compute.forward_s - p.forward_s);
  x.input_grad_s += i * (compute.input_grad_s - p.input_grad_s);
  x.recompute_s += i * (compute.recompute_s - p.recompute_s);
  x.weight_grad_s += w * compute.weight_grad_s;
  return x;
}

double block_local_params(const TermContext& c, int b) {
  const double params = static_cast<double>(c.costs[static_cast<std::size_t>(b)].param_count) / c.choice->tp;
  if (!has_expert_parallelism(c, b)) return params;
  const int ep = c.choice->ep;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  return params - static_cast<double>(partition::expert_param_count(block)) / c.choice->tp * (ep - 1) / ep;
}

double block_expert_params(const TermContext& c, int b) {
  if (!has_expert_parallelism(c, b)) return 0.0;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  return static_cast<double>(partition::expert_param_count(block)) / c.choice->tp / c.choice->ep;
}

double zero3_block_gather_s(const TermContext& c, int b) {
  if (c.zero != 3) return 0.0;
  const double experts = block_expert_params(c, b);
  const double rest = block_local_params(c, b) - experts;
  return c.collective_s(Collective::kAllGather, c.act_bytes * rest, c.replicas, *c.dp_link) +
         c.collective_s(Collective::kAllGather, c.act_bytes * experts, c.expert_replicas, *c.dp_link);
}

StageGathers zero3_stage_gathers(const TermContext& c, const std::vector<double>& g,
                                 const std::vector<double>& block_forward, const std::vector<double>& block_backward) {
  StageGathers x;
  if (c.zero != 3 || c.replicas <= 1 || g.empty()) return x;
  const std::size_t n = g.size();
  x.forward_s = g.front();
  x.backward_s = g.back();
  double all = g.front();
  for (std::size_t k = 1; k < n; ++k) {
    x.forward_s += std::max(0.0, g[k] - block_forward[k - 1]);
    x.backward_s += std::max(0.0, g[n - 1 - k] - block_backward[n - k]);
    all += g[k];
  }
  x.hidden_forward_s = all - x.forward_s;
  x.hidden_backward_s = all - x.backward_s;
  return x;
}

namespace {

// A reduction of `grad_bytes` over `n` ranks (the replicas, or the expert-dp group), per micro-batch or per step.
GradientReduction reduction_over(const TermContext& c, double grad_bytes, double w_free, int n, bool per_microbatch) {
  const config::RunConfig& config = *c.config;
  const Link& link = *c.dp_link;  // an expert-dp group spans the replicas' ranks with stride ep: the same link
  GradientReduction x;
  const double wire = config.parallel.grad_reduce_dtype == config::GradReduceDtype::kBf16 ? grad_bytes / 2 : grad_bytes;
  const bool gathers_after_step = c.zero == 1 || c.zero == 2;
  // ZeRO 0 all-reduces the gradients; 1, 2 and 3 reduce-scatter them (half an all-reduce's bytes: each replica
  // keeps its shard); 1 and 2 then all-gather the updated parameters after the optimizer step (3 keeps them
  // sharded and gathers per block, zero3_stage_gathers).
  x.reduce_s = c.zero == 0 ? c.collective_s(Collective::kAllReduce, wire, n, link)
                           : c.collective_s(Collective::kReduceScatter, wire, n, link);
  // The gather moves the f32 master values (the engine's trainer), or the bf16 parameters of a bf16 run
  // (SearchOptions::param_gather_bf16: Megatron-LM's distributed optimizer).
  const double gathered = c.options->param_gather_bf16 && c.bf16 ? grad_bytes / 2 : grad_bytes;
  x.step_gather_s = gathers_after_step ? c.collective_s(Collective::kAllGather, gathered, n, link) : 0.0;
  x.bytes = ring_bytes(wire, n, c.zero == 0) + (gathers_after_step ? ring_bytes(gathered, n, false) : 0.0);
  if (per_microbatch) {
    // optimizer.zero_reduce per_microbatch: every micro-batch reduce-scatters the stage's gradients. The last
    // one is REDUCE_GRAD's (above); each earlier one runs behind the next weight-gradient pass, and what the
    // pass cannot hide lengthens it (spread over the stage's W actions).
    const double m = c.micro_batches;
    const double hidden_by = w_free;
    x.per_w_exposed_s = m > 1 ? std::max(0.0, x.reduce_s - hidden_by) * (m - 1) / m : 0.0;
    x.per_w_hidden_s = m > 1 ? std::min(x.reduce_s, hidden_by) * (m - 1) / m : 0.0;
    x.bytes += (m - 1) * ring_bytes(wire, n, false);
  }
  return x;
}

}  // namespace

GradientReduction gradient_reduction(const TermContext& c, double grad_bytes, double w_free) {
  return reduction_over(c, grad_bytes, w_free, c.replicas, c.per_microbatch);
}

GradientReduction expert_gradient_reduction(const TermContext& c, double grad_bytes) {
  return reduction_over(c, grad_bytes, 0.0, c.expert_replicas, false);
}

double overlapped_reduction_s(const std::vector<double>& transfer, const std::vector<double>& compute) {
  double computed = 0, sent = 0;
  for (std::size_t k = 0; k < transfer.size(); ++k) {
    computed += k < compute.size() ? compute[k] : 0.0;
    sent = std::max(sent, computed) + transfer[k];
  }
  return std::max(0.0, sent - computed);
}

double overlapped_gather_s(const std::vector<double>& transfer, const std::vector<double>& compute) {
  double gathered = 0, computed = 0, alone = 0;
  for (std::size_t k = 0; k < transfer.size(); ++k) {
    gathered += transfer[k];
    const double block = k < compute.size() ? compute[k] : 0.0;
    computed = std::max(computed, gathered) + block;
    alone += block;
  }
  return std::max(0.0, computed - alone);
}

double optimizer_step_s(const TermContext& c, double local_params, double expert_params) {
  const config::RunConfig& config = *c.config;
  const partition::MeasuredCosts& measured = c.profile->measured;
  // The update streams the value and gradient in and the value out, and each state tensor in and out (f32).
  const double bytes_per_param = 4.0 * (3 + 2 * config.optimizer.state_tensors_per_param());
  // ZeRO: each replica updates its shard (of the experts, its expert-dp group's shard).
  const int shards = c.zero >= 1 ? c.replicas : 1;
  const int expert_shards = c.zero >= 1 ? c.expert_replicas : 1;
  const double updated = (local_params - expert_params) / shards + expert_params / expert_shards;
  double seconds = updated * bytes_per_param / c.profile->memory_bandwidth_Bps;
  if (measured.adamw_s_per_param > 0) {  // timed by `cleave profile`
    const double per_param = config.optimizer.type == config::OptimizerType::kAdamw ? measured.adamw_s_per_param
                             : config.optimizer.momentum != 0.0 ? measured.sgd_momentum_s_per_param
                                                                : measured.sgd_s_per_param;
    seconds = updated * per_param;
  }
  return seconds * c.core_sharing;
}

// --- Assembly ----------------------------------------------------------------------------------------------

namespace {

void add_block_seconds(std::vector<BlockPassSeconds>& into, const BlockPassSeconds& b) {
  auto it = std::find_if(into.begin(), into.end(), [&](const BlockPassSeconds& k) { return k.block == b.block; });
  if (it == into.end()) {
    into.push_back({b.block, 0, 0, 0, 0, 0, {}, {}});
    it = into.end() - 1;
  }
  it->forward_s += b.forward_s;
  it->input_grad_s += b.input_grad_s;
  it->weight_grad_s += b.weight_grad_s;
  it->recompute_s += b.recompute_s;
  for (std::size_t p = 0; p < b.elementwise_s.size(); ++p) {
    it->elementwise_s[p] += b.elementwise_s[p];
    it->launch_s[p] += b.launch_s[p];
  }
}

}  // namespace

std::vector<StageCosts> stage_costs(const TermContext& c, const std::vector<std::int64_t>& working_set) {
  using T = StepTerm;
  const run_plan::Plan& plan = *c.plan;
  const PlanChoice& choice = *c.choice;
  const int num_stages = plan.num_stages();
  std::vector<StageCosts> stages(static_cast<std::size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    StageCosts& st = stages[static_cast<std::size_t>(s)];
    const double warm = c.profile->measured.warm_fraction(working_set[static_cast<std::size_t>(plan.stage_to_rank(s))]);
    double grad_bytes = 0, expert_grad_bytes = 0, stage_w = 0, stage_i = 0, cp_hidden_backward = 0;
    std::vector<double> block_f, block_b, gathers;  // per block, for ZeRO-3's prefetch (seconds free to hide it)
    // Per block, for --overlap-grad-reduce: gradient bytes, and the W compute block_b leaves out (unfused schedules).
    std::vector<double> block_grad_bytes, block_w;
    for (int b = range.begin; b < range.end; ++b) {
      const BlockCompute even = block_compute(c, b, warm);  // every ep rank's mean rows
      const BlockCollectives cp = context_parallel_exchange(c, b, even);
      const BlockCollectives ep = expert_all_to_all(c, b);
      const BlockCompute compute = expert_imbalance_compute(c, b, even);  // the busiest ep rank's
      const BlockCollectives tp = tensor_parallel_overlap(c, tensor_parallel_collectives(c, b), compute, cp);
      // Each pass's GEMMs in its own term, its elementwise traffic and launches in theirs.
      const PassSplit& e = compute.elementwise;
      const PassSplit& l = compute.launch;
      const double cs = c.core_sharing;
      BlockPassSeconds kind{std::string(enum_name(plan.spec.blocks[static_cast<std::size_t>(b)].kind)), 1,
                            cs * (compute.forward_s - e.forward_s - l.forward_s),
                            cs * (compute.input_grad_s - e.input_grad_s - l.input_grad_s),
                            cs * (compute.weight_grad_s - e.weight_grad_s - l.weight_grad_s),
                            cs * (compute.recompute_s - e.recompute_s - l.recompute_s),
                            {cs * e.forward_s, cs * e.input_grad_s, cs * e.weight_grad_s, cs * e.recompute_s},
                            {cs * l.forward_s, cs * l.input_grad_s, cs * l.weight_grad_s, cs * l.recompute_s}};
      st.forward[T::kForward] += kind.forward_s;
      st.input_grad[T::kInputGrad] += kind.input_grad_s;
      st.input_grad[T::kRecompute] += kind.recompute_s;
      st.weight_grad[T::kWeightGrad] += kind.weight_grad_s;
      st.forward[T::kElementwise] += kind.elementwise_s[kPassF];
      st.input_grad[T::kElementwise] += kind.elementwise_s[kPassI] + kind.elementwise_s[kPassRerun];
      st.weight_grad[T::kElementwise] += kind.elementwise_s[kPassW];
      st.forward[T::kKernelLaunch] += kind.launch_s[kPassF];
      st.input_grad[T::kKernelLaunch] += kind.launch_s[kPassI] + kind.launch_s[kPassRerun];
      st.weight_grad[T::kKernelLaunch] += kind.launch_s[kPassW];
      st.forward[T::kTensorParallel] += tp.forward_s;
      st.input_grad[T::kTensorParallel] += tp.backward_s + tp.rerun_s;
      st.forward[T::kContextParallel] += cp.forward_s;
      st.input_grad[T::kContextParallel] += cp.backward_s + cp.rerun_s;
      st.forward.hidden_at(T::kContextParallel) += cp.hidden_forward_s;
      st.input_grad.hidden_at(T::kContextParallel) += cp.hidden_backward_s;
      st.forward.hidden_at(T::kTensorParallel) += tp.hidden_forward_s;
      st.input_grad.hidden_at(T::kTensorParallel) += tp.hidden_backward_s;
      st.forward[T::kExpertAllToAll] += ep.forward_s;
      st.input_grad[T::kExpertAllToAll] += ep.backward_s + ep.rerun_s;
      st.comm_bytes += tp.bytes + cp.bytes + ep.bytes;
      add_block_seconds(st.blocks, kind);
      grad_bytes += 4.0 * block_local_params(c, b);  // E / ep of a moe block's experts under ep
      expert_grad_bytes += 4.0 * block_expert_params(c, b);  // of which reduced over expert-dp
      block_grad_bytes.push_back(4.0 * block_local_params(c, b));
      block_w.push_back(c.fused_backward ? 0.0 : c.core_sharing * compute.weight_grad_s);
      stage_w += compute.weight_grad_s;
      stage_i += compute.backward_input_s();
      cp_hidden_backward += cp.hidden_backward_s;
      // What of the block's compute is left to hide the next block's prefetch: the ring's K/V hops hide under the
      // same compute first (the same seconds cannot hide two transfers).
      block_f.push_back(c.core_sharing * compute.forward_s - cp.hidden_forward_s - tp.hidden_forward_s);
      block_b.push_back(c.core_sharing * (compute.backward_input_s() + (c.fused_backward ? compute.weight_grad_s : 0.0)) -
                        cp.hidden_backward_s - tp.hidden_backward_s);
      gathers.push_back(zero3_block_gather_s(c, b));
      if (c.zero == 3) {
        const double experts = block_expert_params(c, b), rest = block_local_params(c, b) - experts;
        st.comm_bytes += 2 * c.micro_batches * (ring_bytes(c.act_bytes * rest, c.replicas, false) +
                                                ring_bytes(c.act_bytes * experts, c.expert_replicas, false));
      }
    }
    const StageGathers g = zero3_stage_gathers(c, gathers, block_f, block_b);
    st.forward[T::kZeroGather] += g.forward_s;
    st.input_grad[T::kZeroGather] += g.backward_s;
    st.forward.hidden_at(T::kZeroGather) += g.hidden_forward_s;
    st.input_grad.hidden_at(T::kZeroGather) += g.hidden_backward_s;
    // Reducing per micro-batch, W hides the earlier reductions; in a fused B, ZeRO-3's backward prefetch hid under
    // the I compute first and then under W: what it took of W is not there twice.
    double w_free = c.core_sharing * stage_w;
    if (c.fused_backward) w_free -= std::max(0.0, g.hidden_backward_s - (c.core_sharing * stage_i - cp_hidden_backward));
    // Expert parallelism: the experts' gradients over the expert-dp group, after the rest over the replicas.
    const GradientReduction r = gradient_reduction(c, grad_bytes - expert_grad_bytes, std::max(0.0, w_free));
    const GradientReduction e = expert_gradient_reduction(c, expert_grad_bytes);
    st.reduce_grad[T::kDataParallel] = r.reduce_s + e.reduce_s;
    st.weight_grad[T::kDataParallel] = r.per_w_exposed_s;
    st.weight_grad.hidden_at(T::kDataParallel) = r.per_w_hidden_s;
    st.step_gather_s = r.step_gather_s + e.step_gather_s;
    if (c.options->overlap_grad_reduce && grad_bytes > 0) {
      // Megatron-LM's --overlap-grad-reduce / --overlap-param-gather, FSDP: block by block behind the last
      // micro-batch's backward (last block first) and the next step's forward (first block first). What hides them
      // is the blocks' compute less what the ring, tp overlap (block_f / block_b) and ZeRO-3's prefetch took of it.
      const double reduce_all = r.reduce_s + e.reduce_s, gather_all = st.step_gather_s;
      const std::size_t n = block_grad_bytes.size();
      std::vector<double> reduce(n), gather(n), backward(n), forward(n);
      for (std::size_t k = 0; k < n; ++k) {
        const double share = block_grad_bytes[k] / grad_bytes;
        reduce[k] = reduce_all * share;
        gather[k] = gather_all * share;
        forward[k] = std::max(0.0, block_f[k]);
        const double prefetch = k > 0 && c.zero == 3 ? std::min(gathers[k - 1], std::max(0.0, block_b[k])) : 0.0;
        backward[k] = std::max(0.0, block_b[k] + block_w[k] - prefetch);
      }
      std::vector<double> reduce_back(reduce.rbegin(), reduce.rend()), backward_back(backward.rbegin(), backward.rend());
      const double exposed = overlapped_reduction_s(reduce_back, backward_back);
      st.reduce_grad[T::kDataParallel] = exposed;
      st.reduce_grad.hidden_at(T::kDataParallel) = reduce_all - exposed;
      const double gather_exposed = overlapped_gather_s(gather, forward);
      st.step_gather_s = gather_exposed;
      st.step_gather_hidden_s = gather_all - gather_exposed;
    }
    st.comm_bytes += r.bytes + e.bytes;
    st.params = grad_bytes / 4.0;
    st.expert_params = expert_grad_bytes / 4.0;
    // The boundary: the activation out and its gradient back each micro-batch.
    st.output_bytes = static_cast<double>(c.costs[static_cast<std::size_t>(range.end - 1)].output_bytes) * c.micro;
    if (s + 1 < num_stages) st.comm_bytes += 2 * c.micro_batches * st.output_bytes;
  }
  // Megatron's scatter/gather of boundary tensors: each tp rank sends 1/tp of the boundary tensor, and the
  // receiving stage's tp group all-gathers it inside the node (before F from the stage before, before I from the
  // stage after). A V schedule's turn stays on its rank and sends nothing.
  for (int s = 0; s + 1 < num_stages && c.options->scatter_gather_boundaries && choice.tp > 1; ++s) {
    if (plan.stage_to_rank(s + 1) == plan.stage_to_rank(s)) continue;
    StageCosts& st = stages[static_cast<std::size_t>(s)];
    const double whole = st.output_bytes;
    const double gather = c.collective_s(Collective::kAllGather, whole, choice.tp, c.profile->intra_node);
    st.output_bytes = whole / choice.tp;
    stages[static_cast<std::size_t>(s + 1)].forward[T::kTensorParallel] += gather;
    st.input_grad[T::kTensorParallel] += gather;
  }
  return stages;
}

pipeline::SimulationCosts simulation_costs(const TermContext& c, const std::vector<StageCosts>& stages,
                                           ActionTerms& optimizer) {
  const run_plan::Plan& plan = *c.plan;
  const int num_stages = plan.num_stages();
  pipeline::SimulationCosts sim = pipeline::SimulationCosts::uniform(num_stages, 0, 0, 0);
  std::vector<double> rank_params(static_cast<std::size_t>(c.choice->pp), 0.0);
  std::vector<double> rank_experts(static_cast<std::size_t>(c.choice->pp), 0.0);
  std::vector<double> rank_gather(static_cast<std::size_t>(c.choice->pp), 0.0);
  std::vector<double> rank_gather_hidden(static_cast<std::size_t>(c.choice->pp), 0.0);
  for (int s = 0; s < num_stages; ++s) {
    const StageCosts& st = stages[static_cast<std::size_t>(s)];
    auto& sc = sim.stages[static_cast<std::size_t>(s)];
    sc.forward = st.forward.total();
    sc.backward_input = st.input_grad.total();
    if (plan.schedule.overlap_fb_pairs) {  // parallel.moe_a2a_overlap: the pairs hide the all-to-alls (simulator.hpp)
      sc.forward_all_to_all = st.forward[StepTerm::kExpertAllToAll];
      sc.backward_all_to_all = st.input_grad[StepTerm::kExpertAllToAll];
      sc.forward -= sc.forward_all_to_all;
      sc.backward_input -= sc.backward_all_to_all;
    }
    sc.backward_weight = st.weight_grad.total();
    sc.reduce_grad = st.reduce_grad.total();
    sc.output_bytes = st.output_bytes;
    rank_params[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.params;
    rank_experts[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.expert_params;
    rank_gather[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.step_gather_s;
    rank_gather_hidden[static_cast<std::size_t>(plan.stage_to_rank(s))] += st.step_gather_hidden_s;
  }
  // The busiest rank's update; ZeRO-1/2's all-gather of the updated parameters follows it on every rank.
  optimizer = ActionTerms{};
  double busiest_update = 0;
  for (std::size_t r = 0; r < rank_params.size(); ++r) {
    busiest_update = std::max(busiest_update, optimizer_step_s(c, rank_params[r], rank_experts[r]));
  }
  optimizer[StepTerm::kOptimizer] = busiest_update;
  const auto slowest = std::max_element(rank_gather.begin(), rank_gather.end());
  optimizer[StepTerm::kZeroGather] = *slowest;
  optimizer.hidden_at(StepTerm::kZeroGather) = rank_gather_hidden[static_cast<std::size_t>(slowest - rank_gather.begin())];
  sim.optimizer_step = optimizer.total();
  sim.p2p_latency = c.choice->pp > 1 ? c.p2p_link->latency_s : 0.0;
  sim.p2p_bandwidth = c.p2p_link->bandwidth_Bps;
  sim.blocking_p2p = c.options->blocking_p2p;
  sim.blocking_fb_pairs = c.options->blocking_p2p && c.choice->schedule == "interleaved_1f1b";
  const partition::MeasuredCosts& measured = c.profile->measured;
  if (measured.p2p && c.one_node && c.choice->pp > 1) {
    sim.p2p_latency = measured.p2p->latency_s;
    sim.p2p_bandwidth = measured.p2p->bandwidth_Bps;
  }
  return sim;
}

StepBreakdown step_breakdown(const TermContext& c, const std::vector<StageCosts>& stages, const ActionTerms& optimizer,
                             const pipeline::SimulationCosts& sim, const pipeline::SimulationResult& result) {
  const run_plan::Plan& plan = *c.plan;
  StepBreakdown bd;
  for (std::size_t r = 0; r < result.stats.ranks.size(); ++r) {
    if (result.stats.ranks[r].busy > result.stats.ranks[static_cast<std::size_t>(bd.rank)].busy) bd.rank = static_cast<int>(r);
  }
  ActionTerms busy;
  for (const auto& a : plan.schedule.ranks[static_cast<std::size_t>(bd.rank)]) {
    const StageCosts& st = stages[static_cast<std::size_t>(std::max(0, a.stage))];
    switch (a.kind) {
      case pipeline::ActionKind::kForward: busy += st.forward; bd.add_action(StepAction::kForward, st.forward); break;
      case pipeline::ActionKind::kBackwardInput: busy += st.input_grad; bd.add_action(StepAction::kInputGrad, st.input_grad); break;
      case pipeline::ActionKind::kBackwardWeight: busy += st.weight_grad; bd.add_action(StepAction::kWeightGrad, st.weight_grad); break;
      case pipeline::ActionKind::kBackward:
        busy += st.input_grad, busy += st.weight_grad;
        bd.add_action(StepAction::kInputGrad, st.input_grad), bd.add_action(StepAction::kWeightGrad, st.weight_grad);
        break;
      case pipeline::ActionKind::kReduceGrad: busy += st.reduce_grad; bd.add_action(StepAction::kReduceGrad, st.reduce_grad); break;
      case pipeline::ActionKind::kOptimizerStep: busy += optimizer; bd.add_action(StepAction::kOptimizer, optimizer); break;
      default: break;
    }
    // Compute per block kind: each F, I, W (B = I + W) of the stage adds its blocks' share of that pass.
    const bool f = a.kind == pipeline::ActionKind::kForward;
    const bool i = a.kind == pipeline::ActionKind::kBackwardInput || a.kind == pipeline::ActionKind::kBackward;
    const bool w = a.kind == pipeline::ActionKind::kBackwardWeight || a.kind == pipeline::ActionKind::kBackward;
    if (!f && !i && !w) continue;
    for (const BlockPassSeconds& k : st.blocks) {
      BlockPassSeconds pass{k.block, 0, f ? k.forward_s : 0.0, i ? k.input_grad_s : 0.0,
                            w ? k.weight_grad_s : 0.0, i ? k.recompute_s : 0.0, {}, {}};
      for (std::size_t p : {std::size_t{kPassF}, std::size_t{kPassI}, std::size_t{kPassW}, std::size_t{kPassRerun}}) {
        const bool on = p == kPassF ? f : p == kPassW ? w : i;
        pass.elementwise_s[p] = on ? k.elementwise_s[p] : 0.0;
        pass.launch_s[p] = on ? k.launch_s[p] : 0.0;
      }
      add_block_seconds(bd.blocks, pass);
    }
  }
  for (int s = 0; s < plan.num_stages(); ++s) {  // the blocks the rank holds, by kind
    if (plan.stage_to_rank(s) != bd.rank) continue;
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    for (int b = range.begin; b < range.end; ++b) {
      const std::string kind(enum_name(plan.spec.blocks[static_cast<std::size_t>(b)].kind));
      for (auto& k : bd.blocks) k.blocks += k.block == kind ? 1 : 0;
    }
  }
  if (plan.schedule.overlap_fb_pairs) {  // what the F&B pairs hid of the rank's all-to-alls (simulator.hpp)
    double all_to_all = 0;
    for (const auto& a : plan.schedule.ranks[static_cast<std::size_t>(bd.rank)]) {
      if (a.kind == pipeline::ActionKind::kForward) all_to_all += sim.stages[static_cast<std::size_t>(a.stage)].forward_all_to_all;
      if (pipeline::is_backward_input(a.kind)) all_to_all += sim.stages[static_cast<std::size_t>(a.stage)].backward_all_to_all;
    }
    const double hidden = std::max(0.0, all_to_all - result.exposed_all_to_all[static_cast<std::size_t>(bd.rank)]);
    busy[StepTerm::kExpertAllToAll] -= hidden;
    busy.hidden_at(StepTerm::kExpertAllToAll) += hidden;
  }
  bd.seconds = busy.exposed;
  bd.hidden = busy.hidden;
  // Idle: what free point-to-point transfers would remove is theirs, the rest is bubble.
  const double step = result.stats.makespan;
  const double busy_s = busy.total();
  double p2p = 0;
  if (c.choice->pp > 1 && (sim.p2p_latency > 0 || sim.p2p_bandwidth > 0)) {
    pipeline::SimulationCosts free_p2p = sim;
    free_p2p.p2p_latency = 0;
    free_p2p.p2p_bandwidth = 0;  // infinite
    const double without = pipeline::simulate(plan.schedule, free_p2p).stats.makespan;
    p2p = std::clamp(step - without, 0.0, std::max(0.0, step - busy_s));
  }
  bd.seconds[static_cast<std::size_t>(StepTerm::kPointToPoint)] = p2p;
  bd.seconds[static_cast<std::size_t>(StepTerm::kBubble)] = std::max(0.0, step - busy_s - p2p);
  bd.set_groups();
  return bd;
}

}  // namespace cleave::planner
