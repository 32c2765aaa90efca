// The tensor_parallel term (docs/planner.md, "The step, term by term"): a block's tp collectives per micro-batch, as
// the cost model lists what its layers post (partition::tp_block_comm: all-reduces, or sequence parallelism's
// reduce-scatters and all-gathers, in F, I and W), on the intra-node link, and what Megatron-Core's tp communication
// overlap hides of them under the same pass's compute. Invariant: a second of compute hides at
// most one transfer, so the overlap gets only what context parallelism's ring left of the pass.
#include "engine/planner/step_terms.hpp"

#include <algorithm>
#include <vector>

#include "partition/cost_model.hpp"

namespace cleave::planner {

using partition::Collective;
using partition::Recompute;

namespace {

// The phases a collective's handoffs count (collective_handoffs.hpp).
Exchange exchange_of(Collective op) {
  switch (op) {
    case Collective::kAllReduce: return Exchange::kAllReduce;
    case Collective::kReduceScatter: return Exchange::kReduceScatter;
    case Collective::kAllGather: return Exchange::kAllGather;
  }
  return Exchange::kAllReduce;
}

// One pass's tp collectives for a micro-batch (the cost model's list, per sample and at the full sequence): each
// kWhole one collective of micro × bytes ÷ cp; each kPerSample micro collectives of bytes ÷ cp, one after the other
// (their latency micro times) but posted together, so one meeting; each kFixed one of its bytes. A meeting and its
// handoffs per entry of the list; `bytes`: what a rank sends of them on a ring.
struct PassPrice {
  double seconds = 0, meetings = 0, handoffs = 0, bytes = 0;
};
PassPrice price_pass(const TermContext& c, const std::vector<partition::TpCollective>& list) {
  const PlanChoice& choice = *c.choice;
  const Link& link = c.profile->intra_node;
  PassPrice p;
  for (const partition::TpCollective& x : list) {
    const double sample = static_cast<double>(x.bytes) / choice.cp;
    const double bytes = x.batching == partition::TpBatching::kFixed ? static_cast<double>(x.bytes)
                         : x.batching == partition::TpBatching::kWhole ? c.micro * sample
                                                                       : sample;
    const double posts = x.batching == partition::TpBatching::kPerSample ? c.micro : 1.0;
    p.seconds += posts * c.collective_s(x.op, bytes, choice.tp, link);
    p.meetings += 1;
    p.handoffs += collective_handoffs(exchange_of(x.op), choice.tp, c.ranks_per_core);
    p.bytes += posts * ring_bytes(bytes, choice.tp, x.op == Collective::kAllReduce);
  }
  return p;
}

}  // namespace

BlockCollectives tensor_parallel_collectives(const TermContext& c, int b) {
  const PlanChoice& choice = *c.choice;
  const auto& spec = c.plan->spec;
  BlockCollectives x;
  if (choice.tp <= 1 || !partition::is_language_model(spec.type)) return x;
  const auto& block = spec.blocks[static_cast<std::size_t>(b)];
  // The rerun is priced apart: the list without recomputation, its forward again in I.
  const partition::TpBlockComm comm =
      partition::tp_block_comm(block, c.dtype, choice.tp, choice.sequence_parallel, Recompute::kNone);
  const PassPrice f = price_pass(c, comm.forward), i = price_pass(c, comm.input_grad);
  const PassPrice w = price_pass(c, comm.weight_grad);
  // Full recomputation reruns the repeated layers (the model's blocks), not the embedding, head or loss.
  const bool full = choice.recompute == Recompute::kFull && partition::is_repeated_layer(block.kind);
  x.forward_s = f.seconds;
  x.backward_s = i.seconds;
  x.rerun_s = full ? f.seconds : 0.0;
  x.weight_grad_s = w.seconds;
  x.meetings_forward = f.meetings;
  x.meetings_backward = i.meetings + (full ? f.meetings : 0.0);
  x.meetings_weight = w.meetings;
  x.handoffs_forward = f.handoffs;
  x.handoffs_backward = i.handoffs + (full ? f.handoffs : 0.0);
  x.handoffs_weight = w.handoffs;
  x.bytes = c.micro_batches * ((full ? 2 : 1) * f.bytes + i.bytes + w.bytes);
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
  const double free_w = c.core_sharing * compute.weight_grad_s;  // sequence parallelism's input gathers for dW
  x.forward_s = std::max(0.0, tp.forward_s - free_f);
  x.backward_s = std::max(0.0, tp.backward_s - free_i);
  x.rerun_s = std::max(0.0, tp.rerun_s - free_r);
  x.weight_grad_s = std::max(0.0, tp.weight_grad_s - free_w);
  x.hidden_forward_s = tp.forward_s - x.forward_s;
  x.hidden_backward_s = (tp.backward_s - x.backward_s) + (tp.rerun_s - x.rerun_s);
  x.hidden_weight_s = tp.weight_grad_s - x.weight_grad_s;
  return x;
}

}  // namespace cleave::planner
