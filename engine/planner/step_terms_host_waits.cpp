// The host waits of a CUDA plan's moe blocks (docs/planner.md, "Host waits of routing on a GPU"): routing runs on
// the host, so every MoE layer reads device values back and uploads host ones each pass (docs/cuda.md, "Host
// waits per MoE layer and micro-batch"), and the sigmoid router's bias update reads the bias back and waits once
// more per step. Each wait drains the stream: the GPU idles until the host, woken, launches again. Invariant:
// zero on CPU profiles, on profiles whose blocks were measured (the real layers' times hold their waits), and for
// blocks without routed experts: those plans' figures are unchanged. The host's routing itself (top-k, the rows
// grouped per expert, the router's backward) is priced from the profile's measured `host_routing` fit wherever no
// measured block time holds it: on roofline profiles, CPU's or GPU's.
#include "engine/planner/step_terms.hpp"

namespace cleave::planner {

double host_wait_s(const TermContext& c) {
  const HardwareProfile& p = *c.profile;
  if (p.device_type != DeviceType::kCuda || p.measured.has_blocks()) return 0.0;
  return kHostLaunchAfterWaitS + p.kernel_launch_s;
}

MoeHostWaits moe_host_waits(const TermContext& c, int b) {
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  MoeHostWaits w;
  if (block.n_experts <= 0) return w;
  w.forward = 1;                                         // the router's logits read back
  if (c.choice->ep > 1) w.forward += 2;                  // the wait before the count exchange, the counts' read-back
  if (block.router_bias) w.forward += 1;                 // the sigmoid router's bias read back
  if (block.shared_expert_gate) w.forward += 3;          // its logit read back, two uploads
  w.input_grad = 2;                                      // the weights' gradient read back, the logits' gradient up
  if (c.choice->cp > 1 && block.aux_loss) w.input_grad += 1;  // the balance exchange's sums read back
  if (block.shared_expert_gate) w.input_grad += 2;       // its gradient read back, one upload
  w.rerun = c.choice->recompute == partition::Recompute::kFull ? w.forward : 0;
  return w;
}

void add_moe_host_waits(const TermContext& c, int b, BlockCompute& x) {
  const double each = host_wait_s(c);
  if (each <= 0) return;
  const MoeHostWaits w = moe_host_waits(c, b);
  const auto add = [&](double& total, double& launch, int waits) {
    total += waits * each;
    launch += waits * each;
  };
  add(x.forward_s, x.launch.forward_s, w.forward);
  add(x.input_grad_s, x.launch.input_grad_s, w.input_grad);
  add(x.recompute_s, x.launch.recompute_s, w.rerun);
}

MoeHostRouting moe_host_routing(const TermContext& c, int b) {
  const HardwareProfile& p = *c.profile;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  MoeHostRouting r;
  // A block table or a rate profile's block rates timed the real layer, its routing included.
  if (block.n_experts <= 0 || p.measured.has_blocks() || !p.has_roofline()) return r;
  const partition::MeasuredHostRouting* fit = p.measured.host_routing_of(block.n_experts, block.top_k);
  if (fit == nullptr) return r;
  const double per_token_scale = static_cast<double>(block.n_experts) / static_cast<double>(fit->experts);
  const double tokens = static_cast<double>(c.choice->micro_batch * block.seq_len) / c.choice->cp;
  r.forward_s = fit->intercept.forward_s + fit->per_token.forward_s * per_token_scale * tokens;
  r.input_grad_s = fit->intercept.input_grad_s + fit->per_token.input_grad_s * per_token_scale * tokens;
  r.rerun_s = c.choice->recompute == partition::Recompute::kFull ? r.forward_s : 0.0;
  return r;
}

void add_moe_host_routing(const TermContext& c, int b, BlockCompute& x) {
  const MoeHostRouting r = moe_host_routing(c, b);
  x.forward_s += r.forward_s;
  x.launch.forward_s += r.forward_s;
  x.input_grad_s += r.input_grad_s;
  x.launch.input_grad_s += r.input_grad_s;
  x.recompute_s += r.rerun_s;
  x.launch.recompute_s += r.rerun_s;
}

double router_bias_update_s(const TermContext& c, int routed_layers) {
  const partition::MoeConfig& moe = c.plan->spec.moe;
  if (routed_layers <= 0 || moe.router != partition::RouterKind::kSigmoid || moe.bias_update_rate <= 0) {
    return 0.0;
  }
  return 2.0 * routed_layers * host_wait_s(c);  // the bias read back; the synchronize after its upload
}

}  // namespace cleave::planner
