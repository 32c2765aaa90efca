// stage_costs: every stage's F, I, W and REDUCE_GRAD, term by term, from the per-block terms of the other
// step_terms_*.cpp files. Invariant (step_terms.hpp): a term takes another's output only where it overlaps with
// it, in this order per block: the ring's K/V hops first, then the tp overlap, then ZeRO-3's prefetch, then the
// per-micro-batch reductions behind W; the same second of compute never hides two transfers.
#include "engine/planner/step_terms.hpp"

#include <algorithm>
#include <string>

#include "engine/core/enum_names.hpp"
#include "partition/measured_costs.hpp"

namespace cleave::planner {

using partition::Collective;

namespace {

// What a stage's blocks leave for its stage-level terms: ZeRO-3's prefetch, the gradient reduction and its overlap.
struct StageBlocks {
  double grad_bytes = 0, expert_grad_bytes = 0, stage_w = 0, stage_i = 0, cp_hidden_backward = 0;
  std::vector<double> block_f, block_b, gathers;  // per block, for ZeRO-3's prefetch (seconds free to hide it)
  // Per block, for --overlap-grad-reduce: gradient bytes, and the W compute block_b leaves out (unfused schedules).
  std::vector<double> block_grad_bytes, block_w;
  // A tied head whose table the same rank's embedding writes (the engine's bucket of its own under ZeRO-2 per
  // micro-batch): its bytes, and its index in the per-block vectors (-1 without).
  double table_bytes = 0;
  int table_block = -1;
  std::vector<double> block_main_bytes;  // per block, the gradient bytes reduced over the replicas (not the experts')
};

// A block's meetings per micro-batch into its stage's (StageCosts::meetings, ep_meetings, group_peers): where a
// computing rank gives its core up (add_ep_core_holder_waits, add_group_core_holder_waits).
void count_meetings(const TermContext& c, const BlockCollectives& tp, const BlockCollectives& cp,
                    const BlockCollectives& ep, StageCosts& st) {
  st.meetings += tp.meetings_forward + tp.meetings_backward + tp.meetings_weight + cp.meetings_forward +
                 cp.meetings_backward;
  // The peers each waits for: a tp collective's and a cp all-to-all's group less the rank, a ring hop's neighbour.
  const double tp_peers = c.choice->tp - 1;
  const double cp_peers = c.choice->cp_comm == config::ContextParallelComm::kAllToAll ? c.choice->cp - 1 : 1.0;
  GroupPeers& g = st.group_peers;
  g.tp_forward += tp.meetings_forward * tp_peers;
  g.tp_backward += (tp.meetings_backward + tp.meetings_weight) * tp_peers;
  g.cp_forward += cp.meetings_forward * cp_peers;
  g.cp_backward += cp.meetings_backward * cp_peers;
  if (ep.forward_s <= 0) return;  // no routed experts under ep
  const double rerun = c.choice->recompute == partition::Recompute::kFull ? 1.0 : 0.0;
  EpMeetings& m = st.ep_meetings;
  m.all_to_alls_forward += 2;               // dispatch, combine
  m.all_to_alls_backward += 2 + 2 * rerun;  // their gradients, and the rerun's two
  m.counts_forward += 1;
  m.counts_backward += rerun;
  m.blocks += 1;
  st.meetings += 5 + 3 * rerun;
}

// Block b's terms into its stage's passes (at `warm`, the stage's cache warmth), and what it leaves for the
// stage-level terms into `blocks`.
void add_block(const TermContext& c, int b, double warm, StageCosts& st, StageBlocks& blocks) {
  using T = StepTerm;
  const BlockCompute even = block_compute(c, b, warm);  // every ep rank's mean rows
  const BlockCollectives cp = context_parallel_exchange(c, b, even);
  const BlockCollectives ep = expert_all_to_all(c, b);
  const BlockCompute compute = expert_imbalance_compute(c, b, even);  // the busiest ep rank's
  const BlockCollectives tp = tensor_parallel_overlap(c, tensor_parallel_collectives(c, b), compute, cp);
  // Each pass's GEMMs in its own term, its elementwise traffic and launches in theirs.
  const PassSplit& e = compute.elementwise;
  const PassSplit& l = compute.launch;
  const double cs = c.core_sharing;
  BlockPassSeconds kind{std::string(enum_name(c.plan->spec.blocks[static_cast<std::size_t>(b)].kind)), 1,
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
  st.forward[T::kTensorParallel] += tp.forward_s + meeting_wait_s(c, tp.meetings_forward, tp.handoffs_forward);
  st.input_grad[T::kTensorParallel] +=
      tp.backward_s + tp.rerun_s + meeting_wait_s(c, tp.meetings_backward, tp.handoffs_backward);
  st.weight_grad[T::kTensorParallel] += tp.weight_grad_s + meeting_wait_s(c, tp.meetings_weight, tp.handoffs_weight);
  st.forward[T::kContextParallel] += cp.forward_s + meeting_wait_s(c, cp.meetings_forward, cp.handoffs_forward);
  st.input_grad[T::kContextParallel] +=
      cp.backward_s + cp.rerun_s + meeting_wait_s(c, cp.meetings_backward, cp.handoffs_backward);
  st.forward.hidden_at(T::kContextParallel) += cp.hidden_forward_s;
  st.input_grad.hidden_at(T::kContextParallel) += cp.hidden_backward_s;
  st.forward.hidden_at(T::kTensorParallel) += tp.hidden_forward_s;
  st.input_grad.hidden_at(T::kTensorParallel) += tp.hidden_backward_s;
  st.weight_grad.hidden_at(T::kTensorParallel) += tp.hidden_weight_s;
  st.forward[T::kExpertAllToAll] += ep.forward_s + ep_meeting_wait_s(c, ep.meetings_forward, ep.handoffs_forward);
  st.input_grad[T::kExpertAllToAll] +=
      ep.backward_s + ep.rerun_s + ep_meeting_wait_s(c, ep.meetings_backward, ep.handoffs_backward);
  const CountExchange counts = expert_count_exchange(c, b, even);  // before each dispatch: latency and a meeting
  st.forward[T::kCountExchange] += counts.forward_s + counts.wait_forward_s;
  st.input_grad[T::kCountExchange] += counts.rerun_s + counts.wait_rerun_s;
  count_meetings(c, tp, cp, ep, st);
  const SyncWait meet = peer_sync_wait(c, compute, tp, cp, ep, counts);  // the peers' lost time, at the pass's meetings
  st.forward[meet.forward_term] += meet.forward_s;
  st.input_grad[meet.backward_term] += meet.backward_s;
  if (st.ep_exchange.all_to_all_s == 0) st.ep_exchange = ep_exchange_price(c, ep, counts, meet, even, compute);
  st.comm_bytes += tp.bytes + cp.bytes + ep.bytes + counts.bytes;
  add_block_seconds(st.blocks, kind);
  blocks.grad_bytes += 4.0 * block_local_params(c, b);  // E / ep of a moe block's experts under ep
  blocks.expert_grad_bytes += 4.0 * block_expert_params(c, b);  // of which reduced over expert-dp
  blocks.block_grad_bytes.push_back(4.0 * block_local_params(c, b));
  blocks.block_main_bytes.push_back(4.0 * (block_local_params(c, b) - block_expert_params(c, b)));
  blocks.block_w.push_back(c.fused_backward ? 0.0 : c.core_sharing * compute.weight_grad_s - tp.hidden_weight_s);
  blocks.stage_w += compute.weight_grad_s;
  blocks.stage_i += compute.backward_input_s();
  blocks.cp_hidden_backward += cp.hidden_backward_s;
  // What of the block's compute is left to hide the next block's prefetch: the ring's K/V hops hide under the
  // same compute first (the same seconds cannot hide two transfers).
  blocks.block_f.push_back(c.core_sharing * compute.forward_s - cp.hidden_forward_s - tp.hidden_forward_s);
  const double fused_w = c.fused_backward ? compute.weight_grad_s : 0.0;  // W inside B
  const double fused_w_hidden = c.fused_backward ? tp.hidden_weight_s : 0.0;
  blocks.block_b.push_back(c.core_sharing * (compute.backward_input_s() + fused_w) - cp.hidden_backward_s -
                           tp.hidden_backward_s - fused_w_hidden);
  blocks.gathers.push_back(zero3_block_gather_s(c, b));
  if (c.zero == 3) {
    const double experts = block_expert_params(c, b), rest = block_local_params(c, b) - experts;
    st.comm_bytes += 2 * c.micro_batches * (ring_bytes(c.act_bytes * rest, c.replicas, false) +
                                            ring_bytes(c.act_bytes * experts, c.expert_replicas, false));
  }
}

// Megatron-LM's --overlap-grad-reduce / --overlap-param-gather, FSDP: block by block behind the last micro-batch's
// backward (last block first) and the next step's forward (first block first). What hides them is the blocks'
// compute less what the ring, tp overlap (block_f / block_b) and ZeRO-3's prefetch took of it. `reduce_all`: the
// stage's whole reduction, exposed; st.step_gather_s its whole gather.
void overlap_gradient_reduction(const TermContext& c, const StageBlocks& blocks, double reduce_all, StageCosts& st) {
  using T = StepTerm;
  const double gather_all = st.step_gather_s;
  const std::size_t n = blocks.block_grad_bytes.size();
  std::vector<double> reduce(n), gather(n), backward(n), forward(n);
  for (std::size_t k = 0; k < n; ++k) {
    const double share = blocks.block_grad_bytes[k] / blocks.grad_bytes;
    reduce[k] = reduce_all * share;
    gather[k] = gather_all * share;
    forward[k] = std::max(0.0, blocks.block_f[k]);
    const double prefetch =
        k > 0 && c.zero == 3 ? std::min(blocks.gathers[k - 1], std::max(0.0, blocks.block_b[k])) : 0.0;
    backward[k] = std::max(0.0, blocks.block_b[k] + blocks.block_w[k] - prefetch);
  }
  std::vector<double> reduce_back(reduce.rbegin(), reduce.rend()), backward_back(backward.rbegin(), backward.rend());
  const double exposed = overlapped_reduction_s(reduce_back, backward_back);
  st.reduce_grad[T::kDataParallel] = exposed;
  st.reduce_grad.hidden_at(T::kDataParallel) = reduce_all - exposed;
  const double gather_exposed = overlapped_gather_s(gather, forward);
  st.step_gather_s = gather_exposed;
  st.step_gather_hidden_s = gather_all - gather_exposed;
}

// The stage-level terms of the stage whose blocks left `blocks`: ZeRO-3's gathers and prefetch, the gradient
// reduction (per micro-batch behind W; the experts' over expert-dp) and its overlap with the backward.
void add_stage_terms(const TermContext& c, const StageBlocks& blocks, StageCosts& st) {
  using T = StepTerm;
  const StageGathers g = zero3_stage_gathers(c, blocks.gathers, blocks.block_f, blocks.block_b);
  st.forward[T::kZeroGather] += g.forward_s;
  st.input_grad[T::kZeroGather] += g.backward_s;
  st.forward.hidden_at(T::kZeroGather) += g.hidden_forward_s;
  st.input_grad.hidden_at(T::kZeroGather) += g.hidden_backward_s;
  // Reducing per micro-batch, W hides the earlier reductions; in a fused B, ZeRO-3's backward prefetch hid under
  // the I compute first and then under W: what it took of W is not there twice.
  double w_free = c.core_sharing * blocks.stage_w;
  if (c.fused_backward) {
    w_free -= std::max(0.0, g.hidden_backward_s - (c.core_sharing * blocks.stage_i - blocks.cp_hidden_backward));
  }
  // Expert parallelism: the experts' gradients over the expert-dp group, after the rest over the replicas.
  std::vector<double> bucketed = blocks.block_main_bytes;
  if (blocks.table_block >= 0) bucketed.erase(bucketed.begin() + blocks.table_block);
  const GradientReduction r = zero2_bucket_reduction(
      c, gradient_reduction(c, blocks.grad_bytes - blocks.expert_grad_bytes, std::max(0.0, w_free)), bucketed,
      blocks.table_bytes, std::max(0.0, w_free));
  const GradientReduction e = expert_gradient_reduction(c, blocks.expert_grad_bytes);
  st.reduce_grad[T::kDataParallel] = r.reduce_s + e.reduce_s;
  st.weight_grad[T::kDataParallel] = r.per_w_exposed_s;
  st.weight_grad.hidden_at(T::kDataParallel) = r.per_w_hidden_s;
  // Each micro-batch's settle inside B waits for the peers' F and B of that micro-batch (0 but where it applies).
  const auto compute = [](const ActionTerms& a) { return a[T::kForward] + a[T::kInputGrad] + a[T::kWeightGrad] +
                                                         a[T::kRecompute] + a[T::kElementwise] + a[T::kKernelLaunch]; };
  st.weight_grad[T::kDataParallel] +=
      zero2_settle_wait_s(c, compute(st.forward) + compute(st.input_grad) + compute(st.weight_grad));
  st.step_gather_s = r.step_gather_s + e.step_gather_s;
  if (c.options->overlap_grad_reduce && blocks.grad_bytes > 0) {
    overlap_gradient_reduction(c, blocks, r.reduce_s + e.reduce_s, st);
  }
  st.comm_bytes += r.bytes + e.bytes;
  st.params = blocks.grad_bytes / 4.0;
  st.expert_params = blocks.expert_grad_bytes / 4.0;
}

// Megatron's scatter/gather of boundary tensors: each tp rank sends 1/tp of the boundary tensor, and the
// receiving stage's tp group all-gathers it inside the node (before F from the stage before, before I from the
// stage after). A V schedule's turn stays on its rank and sends nothing.
void scatter_gather_boundaries(const TermContext& c, std::vector<StageCosts>& stages) {
  using T = StepTerm;
  const run_plan::Plan& plan = *c.plan;
  const int tp = c.choice->tp;
  for (int s = 0; s + 1 < plan.num_stages() && c.options->scatter_gather_boundaries && tp > 1; ++s) {
    if (plan.stage_to_rank(s + 1) == plan.stage_to_rank(s)) continue;
    StageCosts& st = stages[static_cast<std::size_t>(s)];
    const double whole = st.output_bytes;
    const double gather = c.collective_s(Collective::kAllGather, whole, tp, c.profile->intra_node);
    st.output_bytes = whole / tp;
    stages[static_cast<std::size_t>(s + 1)].forward[T::kTensorParallel] += gather;
    st.input_grad[T::kTensorParallel] += gather;
  }
}

}  // namespace

std::vector<StageCosts> stage_costs(const TermContext& c, const std::vector<std::int64_t>& working_set) {
  const run_plan::Plan& plan = *c.plan;
  const int num_stages = plan.num_stages();
  std::vector<StageCosts> stages(static_cast<std::size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    const auto range = plan.partition.stages[static_cast<std::size_t>(s)];
    StageCosts& st = stages[static_cast<std::size_t>(s)];
    const double warm = c.profile->measured.warm_fraction(working_set[static_cast<std::size_t>(plan.stage_to_rank(s))]);
    StageBlocks blocks;
    for (int b = range.begin; b < range.end; ++b) {
      if (plan.spec.blocks[static_cast<std::size_t>(b)].tied && plan.stage_to_rank(0) == plan.stage_to_rank(s)) {
        blocks.table_block = b - range.begin;
        blocks.table_bytes = 4.0 * block_local_params(c, b);
      }
      add_block(c, b, warm, st, blocks);
    }
    add_stage_terms(c, blocks, st);
    // The boundary: the activation out and its gradient back each micro-batch.
    st.output_bytes = static_cast<double>(c.costs[static_cast<std::size_t>(range.end - 1)].output_bytes) * c.micro;
    if (s + 1 < num_stages) st.comm_bytes += 2 * c.micro_batches * st.output_bytes;
  }
  scatter_gather_boundaries(c, stages);
  add_ep_core_holder_waits(c, stages);  // needs every stage's compute: the holder's action is their mean
  add_group_core_holder_waits(c, stages);
  return stages;
}

}  // namespace cleave::planner
