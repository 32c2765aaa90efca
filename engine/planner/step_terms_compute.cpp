// The compute terms of a plan's step (docs/planner.md, "The step, term by term": forward, input_grad,
// weight_grad, recompute, elementwise, kernel_launch): one block's compute per pass and micro-batch, from the
// profile's measured tables, else the roofline of its kernels (GEMMs, streamed bytes, launches), else its FLOPs
// over the profile's rate, with the stored-probabilities attention's extra cost where a run asks for it, and under
// a run's torchtitan per-op selective policy its own rerun (partition::selective_op_rerun) in the recompute terms.
// Invariant: the elementwise and launch parts are inside the pass totals (stage_costs moves them to their own
// terms), and everything but the launches is ÷ cp (a cp rank launches every kernel on its T / cp rows), plus what the
// cp attention core runs beyond that share (cp_core_compute: ring's chunk pairs, all_to_all's permutes), before core
// sharing.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

#include "partition/block_work.hpp"
#include "partition/cp_core_work.hpp"
#include "partition/families/family.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::planner {

using partition::Recompute;

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

namespace {

// From a profile's measured block tables (at `warm`, the stage's cache warmth): the rerun is its share of the
// measured forward.
BlockCompute measured_block_compute(const TermContext& c, int b, double warm) {
  const PlanChoice& choice = *c.choice;
  const HardwareProfile& profile = *c.profile;
  const auto& cost = c.costs[static_cast<std::size_t>(b)];
  const auto& plain = c.plain_costs[static_cast<std::size_t>(b)];
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  BlockCompute x;
  const partition::BlockTimes t = profile.measured.block_times(block, choice.tp, choice.micro_batch, profile.name, warm);
  // Recomputation reruns part of the forward inside I: its share of the measured forward time.
  const double rerun = plain.forward_flops > 0 ? (cost.input_grad_flops - plain.input_grad_flops) / plain.forward_flops : 0.0;
  x.forward_s = t.forward_s;
  x.input_grad_s = t.input_grad_s;
  x.recompute_s = std::max(0.0, rerun) * t.forward_s;
  x.weight_grad_s = t.weight_grad_s;
  return x;
}

// A block's kernels as the roofline prices them: `work` with the rerun appended to its input_grad, `plain_input`
// the input gradient without it, and whether torchtitan's per-op policy made the rerun.
struct RooflineWork {
  partition::BlockWork work;
  partition::PassWork plain_input;
  bool op_policy = false;
};

RooflineWork roofline_work(const TermContext& c, int b) {
  const PlanChoice& choice = *c.choice;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  const bool sp = choice.sequence_parallel;
  RooflineWork r;
  partition::BlockWork& work = r.work;
  work = partition::block_work(block, c.dtype, choice.recompute, choice.tp, choice.micro_batch, sp);
  // The rerun's kernels are appended to input_grad's, and the roofline prices kernel by kernel: the difference
  // from the plain input gradient is the rerun's own cost, part by part.
  partition::PassWork& plain_input = r.plain_input;
  plain_input = choice.recompute == Recompute::kNone
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
  // FSDP2's all-gather copy-out (SearchOptions::fsdp2_copy_out) before F and before I: the gathered bytes read and
  // written once each, one kernel; not a rerun, so in plain_input too.
  if (c.options->fsdp2_copy_out && c.zero == 3 && c.replicas > 1) {
    partition::PassWork copy;
    copy.stream_bytes = 2 * c.act_bytes * block_local_params(c, b);
    copy.kernels = 1;
    work.forward += copy;
    work.input_grad += copy;
    plain_input += copy;
  }
  // torchtitan's per-op selective policy (SearchOptions::selective_recompute): its rerun, each GEMM at its shape,
  // in place of the attention core's.
  r.op_policy = choice.recompute == Recompute::kSelective &&
                c.options->selective_recompute == partition::SelectiveRecompute::kTorchtitanOp;
  if (r.op_policy) {
    work.input_grad = plain_input;
    work.input_grad += partition::selective_op_rerun(block, c.dtype, choice.tp, choice.micro_batch, sp);
    if (c.options->run_kernels.any() && partition::is_repeated_layer(block.kind)) {  // e.g. an unfused norm's F
      work.input_grad +=
          partition::run_kernels_work(block, c.dtype, c.options->run_kernels, Recompute::kNone, choice.tp, choice.micro_batch, sp)
              .forward;
    }
  }
  return r;
}

// From a shipped (roofline) profile, kernel by kernel, with the stored-probabilities attention's extra cost.
BlockCompute roofline_block_compute(const TermContext& c, int b) {
  const PlanChoice& choice = *c.choice;
  const HardwareProfile& profile = *c.profile;
  const RooflineWork r = roofline_work(c, b);
  const partition::BlockWork& work = r.work;
  const partition::PassWork& plain_input = r.plain_input;
  BlockCompute x;
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
  if (r.op_policy) x.probabilities.recompute_s = 0.0;  // the policy saves the attention's outputs
  const ProbabilitiesCompute& p = x.probabilities;
  const bool rerun = choice.recompute != Recompute::kNone && !r.op_policy;
  x.forward_s += p.forward_s;
  x.input_grad_s += p.input_grad_s;
  x.recompute_s += p.recompute_s;
  x.elementwise.forward_s += p.stream_forward_s;
  x.elementwise.input_grad_s += p.stream_input_grad_s;
  x.elementwise.recompute_s += rerun ? p.stream_forward_s : 0.0;
  x.launch.forward_s += p.launch_forward_s;
  x.launch.input_grad_s += p.launch_input_grad_s;
  x.launch.recompute_s += rerun ? p.launch_forward_s : 0.0;
  return x;
}

// From the block's FLOPs over the profile's rate (its per-pass block rates in f32 where it has them).
BlockCompute flops_block_compute(const TermContext& c, int b) {
  const PlanChoice& choice = *c.choice;
  const HardwareProfile& profile = *c.profile;
  const auto& cost = c.costs[static_cast<std::size_t>(b)];
  const auto& plain = c.plain_costs[static_cast<std::size_t>(b)];
  BlockCompute x;
  const bool rates = !c.bf16 && profile.block_forward_flops > 0;
  const double flops = profile.flops(c.bf16);
  const double per_flop = c.micro / choice.tp;
  x.forward_s = cost.forward_flops * per_flop / (rates ? profile.block_forward_flops : flops);
  const double input_rate = rates ? profile.block_input_grad_flops : flops;
  x.input_grad_s = plain.input_grad_flops * per_flop / input_rate;
  x.recompute_s = (cost.input_grad_flops - plain.input_grad_flops) * per_flop / input_rate;
  x.weight_grad_s = cost.weight_grad_flops * per_flop / (rates ? profile.block_weight_grad_flops : flops);
  return x;
}

}  // namespace

BlockCompute block_compute(const TermContext& c, int b, double warm) {
  const PlanChoice& choice = *c.choice;
  BlockCompute x = c.profile->measured.has_blocks() ? measured_block_compute(c, b, warm)
                   : c.profile->has_roofline()      ? roofline_block_compute(c, b)
                                                    : flops_block_compute(c, b);
  if (choice.cp > 1) {
    // Each cp rank computes its T / cp tokens (ring's chunk pairs balance the causal work): its GEMMs and streamed
    // bytes are ÷ cp. Its kernels are not: every kernel runs once per pass on the rank's T / cp rows, as often as at
    // cp 1, so the launch part of each total stays whole.
    const auto share = [&](double& total, double launch) { total = (total - launch) / choice.cp + launch; };
    share(x.forward_s, x.launch.forward_s);
    share(x.input_grad_s, x.launch.input_grad_s);
    share(x.recompute_s, x.launch.recompute_s);
    share(x.weight_grad_s, x.launch.weight_grad_s);
    ProbabilitiesCompute& p = x.probabilities;
    share(p.forward_s, p.launch_forward_s);
    share(p.input_grad_s, p.launch_input_grad_s);
    share(p.recompute_s, p.recompute_s != 0.0 ? p.launch_forward_s : 0.0);  // the rerun is F's kernels again
    p.stream_forward_s /= choice.cp;
    p.stream_input_grad_s /= choice.cp;
    x.elementwise /= choice.cp;
    // And what the cp core runs beyond that share (ring's chunk pairs, all_to_all's permutes).
    const CpCoreCompute core = cp_core_compute(c, b);
    x.cp_core = core.total;
    x.forward_s += core.total.forward_s;
    x.input_grad_s += core.total.input_grad_s;
    x.recompute_s += core.total.recompute_s;
    x.elementwise.forward_s += core.elementwise.forward_s;
    x.elementwise.input_grad_s += core.elementwise.input_grad_s;
    x.elementwise.recompute_s += core.elementwise.recompute_s;
    x.launch.forward_s += core.launch.forward_s;
    x.launch.input_grad_s += core.launch.input_grad_s;
    x.launch.recompute_s += core.launch.recompute_s;
  }
  add_moe_host_waits(c, b, x);  // GPU plans: routing's host waits (none on the CPU, for other blocks)
  add_moe_host_routing(c, b, x);  // roofline plans: the host's routing (measured block times hold it)
  return x;
}

CpCoreCompute cp_core_compute(const TermContext& c, int b) {
  const PlanChoice& choice = *c.choice;
  CpCoreCompute x;
  if (choice.cp <= 1) return x;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  const partition::CpCoreWork work =
      partition::cp_core_work(block, c.dtype, choice.recompute, choice.tp, choice.cp,
                              choice.cp_comm == config::ContextParallelComm::kRing, choice.micro_batch);
  const HardwareProfile& profile = *c.profile;
  // A measured profile timed one rank's core at T (÷ cp); its products at the cp core's sizes are known only to a
  // roofline. Streams and launches are priced wherever the profile has their rate.
  const auto price = [&](const partition::CpCorePass& p, double& total, double& stream, double& launch) {
    stream = profile.memory_bandwidth_Bps > 0 ? profile.elementwise_seconds(p.extra) : 0.0;
    launch = profile.launch_seconds(p.extra);
    double products = 0;
    if (profile.has_roofline() && !profile.measured.has_blocks()) {
      products = profile.gemm_pass_seconds(p.products, c.bf16) -
                 profile.gemm_pass_seconds(p.replaced, c.bf16) / choice.cp;
    }
    total = stream + launch + products;
  };
  price(work.forward, x.total.forward_s, x.elementwise.forward_s, x.launch.forward_s);
  price(work.input_grad, x.total.input_grad_s, x.elementwise.input_grad_s, x.launch.input_grad_s);
  price(work.rerun, x.total.recompute_s, x.elementwise.recompute_s, x.launch.recompute_s);
  return x;
}

}  // namespace cleave::planner
