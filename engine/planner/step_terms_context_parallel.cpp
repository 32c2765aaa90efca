// The context_parallel term (docs/planner.md, "The step, term by term" and "Context parallelism"): an attention
// layer's key/value exchange per micro-batch, all-to-all (nothing hidden) or ring (each pass's K/V hops under that
// pass's compute of the block). Invariant: exposed + hidden = the exchange's whole time, per pass.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

namespace cleave::planner {

using partition::Collective;
using partition::Recompute;

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
    x.meetings_forward = 4;
    x.meetings_backward = full ? 8 : 4;
    const double each = collective_handoffs(Exchange::kAllToAll, choice.cp, c.ranks_per_core);
    x.handoffs_forward = 4 * each;
    x.handoffs_backward = x.meetings_backward * each;
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
  x.meetings_forward = hops;  // a hop meets the ring's neighbours
  x.meetings_backward = hops + choice.cp + (full ? hops : 0.0);
  const double hop_handoffs = collective_handoffs(Exchange::kPointToPoint, 2, c.ranks_per_core);  // one neighbour's
  x.handoffs_forward = x.meetings_forward * hop_handoffs;
  x.handoffs_backward = x.meetings_backward * hop_handoffs;
  return x;
}

}  // namespace cleave::planner
