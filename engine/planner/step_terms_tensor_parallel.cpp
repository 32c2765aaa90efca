// The tensor_parallel term (docs/planner.md, "The step, term by term"): a block's tp all-reduces (or sequence
// parallelism's reduce-scatter + all-gather) per micro-batch, on the intra-node link, and what Megatron-Core's tp
// communication overlap hides of them under the same pass's compute. Invariant: a second of compute hides at
// most one transfer, so the overlap gets only what context parallelism's ring left of the pass.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

namespace cleave::planner {

using partition::Collective;
using partition::Recompute;

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
  const double meetings = choice.sequence_parallel ? 2 : 1;  // collectives per exchange
  const double rpc = c.ranks_per_core;  // their handoffs per exchange: 2 phases either way
  const double handoffs = choice.sequence_parallel ? collective_handoffs(Exchange::kReduceScatter, choice.tp, rpc) +
                                                         collective_handoffs(Exchange::kAllGather, choice.tp, rpc)
                                                   : collective_handoffs(Exchange::kAllReduce, choice.tp, rpc);
  if (partition::is_repeated_layer(block.kind)) {
    x.forward_s = 2 * exchange;
    x.backward_s = 2 * exchange;
    // Full recomputation reruns the forward, its two exchanges included, inside I.
    const bool full = choice.recompute == Recompute::kFull;
    x.rerun_s = full ? 2 * exchange : 0.0;
    exchanges = full ? 6 : 4;
    x.meetings_forward = 2 * meetings;
    x.meetings_backward = (full ? 4 : 2) * meetings;
    x.handoffs_forward = 2 * handoffs;
    x.handoffs_backward = (full ? 4 : 2) * handoffs;
  } else if (block.kind == partition::BlockKind::kEmbedding) {
    x.forward_s = exchange;
    exchanges = 1;
    x.meetings_forward = meetings;
    x.handoffs_forward = handoffs;
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

}  // namespace cleave::planner
