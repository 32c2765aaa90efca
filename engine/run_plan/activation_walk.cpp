// See activation_walk.hpp.
#include "engine/run_plan/activation_walk.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "pipeline/p2p_posting.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::run_plan {

StageBackwardMemory stage_backward_memory(const std::vector<partition::BlockCost>& blocks,
                                          const std::vector<BlockTransients>& transients) {
  StageBackwardMemory m;
  const BlockTransients none;
  const auto phases = [&](std::size_t k) -> const BlockTransients& {
    return k < transients.size() ? transients[k] : none;
  };
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    const auto& b = blocks[k];
    m.forward_stash += b.activation_bytes, m.weight_stash += b.weight_stash_bytes;
    for (const auto& p : phases(k).forward) m.forward_transients.push_back({m.forward_stash - p.below, p.bytes});
  }
  // Backward visits the blocks last to first. The stage's last block's dy is the boundary tensor received,
  // counted with the transfers in flight, not again here.
  std::int64_t input_offset = 0, fused_offset = 0;  // held above the action's start when block b begins
  std::int64_t weight_offset = 0;                   // the same for a split W (it starts holding every weight stash)
  for (std::size_t k = blocks.size(); k-- > 0;) {
    const auto& b = blocks[k];
    const std::int64_t extra = b.backward_extra_bytes - (k + 1 == blocks.size() ? b.output_bytes : 0);
    m.input_peak = std::max(m.input_peak, input_offset + extra);
    m.fused_peak = std::max(m.fused_peak, fused_offset + extra);
    for (const auto& p : phases(k).backward) {
      m.input_transients.push_back({input_offset + extra - p.below, p.bytes});
      m.fused_transients.push_back({fused_offset + extra - p.below, p.bytes});
    }
    // B's W of the block runs after its I has traded its stash for what W needs.
    m.fused_peak = std::max(m.fused_peak, fused_offset + b.weight_stash_bytes - b.activation_bytes + b.weight_extra_bytes);
    m.weight_peak = std::max(m.weight_peak, weight_offset + b.weight_extra_bytes);
    input_offset += b.weight_stash_bytes - b.activation_bytes;  // I keeps what W needs
    fused_offset -= b.activation_bytes;                         // B's W frees the block's stash
    weight_offset -= b.weight_stash_bytes;                      // W frees it
  }
  return m;
}

namespace {

using WalkKey = std::pair<int, int>;  // (stage, micro-batch)

// The outputs this rank sends, forward and backward (the rest are handed over in place to a stage of this rank).
struct SentOutputs {
  std::set<WalkKey> forward, backward;
};

SentOutputs sent_outputs(const std::vector<pipeline::Action>& actions) {
  SentOutputs sent;
  for (const auto& a : actions) {
    if (a.kind == pipeline::ActionKind::kSendF) sent.forward.insert({a.stage, a.microbatch});
    if (a.kind == pipeline::ActionKind::kSendB) sent.backward.insert({a.stage, a.microbatch});
  }
  return sent;
}

// A rank holding the first and the last stage (ZB-V, DualPipeV) reads a micro-batch's data twice: the first stage's
// F takes its inputs, and its targets (i32, the loss block's rows) wait in the executor until the last stage's F
// takes them into the loss's stash (pipeline/executor.cpp, take_data). Before they were counted the plan was 512 B
// under the measured peak on rank 0 at pp2 under ZB-V and DualPipeV (two micro-batches' targets, T 32, micro-batch
// 2: ScheduleMemory.EveryScheduleFollowsThePlan). The walk's bytes are halved under bf16: the targets are counted
// twice there so they stay i32 (they were 2 B per token under). One micro-batch's targets per sample; 0 elsewhere.
std::int64_t waiting_targets_bytes(const Plan& plan, int pp_rank, const WalkScale& scale) {
  const int last_stage = plan.num_stages() - 1;
  const auto& loss_block = plan.spec.blocks.back();
  const bool holds_both_ends = last_stage > 0 && plan.stage_to_rank(0) == pp_rank &&
                               plan.stage_to_rank(last_stage) == pp_rank;
  if (!holds_both_ends || loss_block.kind != partition::BlockKind::kSoftmaxCrossEntropy) return 0;
  return loss_block.input.rows() * static_cast<std::int64_t>(sizeof(std::int32_t)) * scale.dtype_divisor;
}

// The boundary tensors alive beside the stashes, per sample: the receives posted and the same-rank hand-overs, each
// until its stage consumes it, and the targets waiting in the executor. Invariant: in_flight() is the sum of what
// was posted, handed over or added and not yet taken or removed.
class BoundaryTensors {
 public:
  BoundaryTensors(const std::vector<std::int64_t>& stage_in, const std::vector<std::int64_t>& stage_out)
      : stage_in_(stage_in), stage_out_(stage_out) {}

  // A RECV_F (stage's input) or RECV_B (its output's gradient) posted.
  void post(const pipeline::Action& r) {
    const auto st = static_cast<std::size_t>(r.stage);
    if (r.kind == pipeline::ActionKind::kRecvF) forward_in_[{r.stage, r.microbatch}] = stage_in_[st];
    if (r.kind == pipeline::ActionKind::kRecvB) backward_in_[{r.stage, r.microbatch}] = stage_out_[st];
    in_flight_ += r.kind == pipeline::ActionKind::kRecvF ? stage_in_[st] : stage_out_[st];
  }
  // The input of F / the dy of I or B for `key`, consumed (nothing where none was posted or handed over).
  void take_forward(const WalkKey& key) { take(forward_in_, key); }
  void take_backward(const WalkKey& key) { take(backward_in_, key); }
  // An output no SEND carries, handed to the stage of this rank that consumes it next.
  void hand_over_forward(const WalkKey& to, std::int64_t bytes) { hand_over(forward_in_, to, bytes); }
  void hand_over_backward(const WalkKey& to, std::int64_t bytes) { hand_over(backward_in_, to, bytes); }
  void add(std::int64_t bytes) { in_flight_ += bytes; }
  void remove(std::int64_t bytes) { in_flight_ -= bytes; }
  std::int64_t in_flight() const { return in_flight_; }

 private:
  void take(std::map<WalkKey, std::int64_t>& from, const WalkKey& key) {
    auto it = from.find(key);
    if (it == from.end()) return;
    in_flight_ -= it->second;
    from.erase(it);
  }
  void hand_over(std::map<WalkKey, std::int64_t>& to, const WalkKey& key, std::int64_t bytes) {
    to[key] = bytes;
    in_flight_ += bytes;
  }

  const std::vector<std::int64_t>& stage_in_;
  const std::vector<std::int64_t>& stage_out_;
  std::map<WalkKey, std::int64_t> forward_in_, backward_in_;  // posted receives or same-rank hand-overs
  std::int64_t in_flight_ = 0;
};

}  // namespace

// The rank runs its actions in order: walk them, F adding a stage's forward stash, I trading it for what W
// needs, W or a fused B freeing it; inside I and B each block's backward holds its extra, inside W and B each
// block's weight gradient its weight extra (the stage summary above says how high that goes above what was
// held when the action started). Beside the stashes, the boundary tensors alive (`boundary`, per sample): the
// receive buffers posted and not yet consumed (a communication block's own receives and the next block's, posted
// early: pipeline/p2p_posting.hpp), an I's or B's own dy through it, a compute action's output at its end and,
// when sent, through the next compute action (the executor tests its sends after each action: a send whose receive
// the peer posted early has usually completed by then, but may not have, so the plan takes the later end), and an
// output handed to a stage of the same rank (ZB-V's turn) until that stage consumes it. Measured at tp2 x pp2
// under zb_h1 (SequenceParallel.SplitBackwardMemoryFollowsThePlan): the last stage to the byte; the first stage to
// the byte on the tp rank whose send was still in flight in its I, one boundary tensor (1.9%) over it on the other
// (run to run); the former flat three boundary tensors put the plan 1.1-1.9% (first stage) and 4.7-7.8% (last
// stage) over the measured peak.
ActivationWalkPeaks activation_walk_peak(const Plan& plan, int pp_rank,
                                         const std::vector<StageBackwardMemory>& stage_memory,
                                         const std::vector<std::int64_t>& stage_in,
                                         const std::vector<std::int64_t>& stage_out, const WalkScale& scale) {
  const auto& actions = plan.schedule.ranks[static_cast<std::size_t>(pp_rank)];
  const SentOutputs sent = sent_outputs(actions);
  std::map<std::size_t, const pipeline::P2PBlock*> block_at;
  const std::vector<pipeline::P2PBlock> p2p = pipeline::p2p_blocks(actions);
  for (const auto& block : p2p) block_at[block.first] = &block;
  BoundaryTensors boundary(stage_in, stage_out);
  const int last_stage = plan.num_stages() - 1;
  const std::int64_t targets_bytes = waiting_targets_bytes(plan, pp_rank, scale);
  std::set<int> targets_waiting;  // micro-batches whose targets the executor holds
  std::int64_t held = 0, peak_stash = 0;
  std::int64_t peak_transients = 0;  // bytes: the walk with an attention block's transients (BlockTransients)
  const auto hold = [&](const std::vector<StagePhase>& phases, std::int64_t base) {
    for (const auto& p : phases) peak_transients = std::max(peak_transients, scale.bytes(base + p.held) + p.bytes);
  };
  std::int64_t sending = 0;  // the previous compute action's sent output, until this one's end
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const auto& a = actions[i];
    if (auto found = block_at.find(i); found != block_at.end()) {
      for (std::size_t k : found->second->posted) {
        if (pipeline::is_recv(actions[k].kind)) boundary.post(actions[k]);
      }
      for (std::size_t k : found->second->next_receives) boundary.post(actions[k]);
    }
    if (a.stage < 0 || !pipeline::is_compute(a.kind)) continue;
    const auto st = static_cast<std::size_t>(a.stage);
    const StageBackwardMemory& sm = stage_memory[st];
    const WalkKey key{a.stage, a.microbatch};
    std::int64_t output = 0;  // what the action leaves for a neighbour stage
    switch (a.kind) {
      case pipeline::ActionKind::kForward:
        boundary.take_forward(key);  // the input becomes the stash
        hold(sm.forward_transients, held + boundary.in_flight() + sending);
        held += sm.forward_stash;
        if (targets_bytes > 0 && a.stage == 0 && targets_waiting.insert(a.microbatch).second) {
          boundary.add(targets_bytes);
        }
        if (a.stage == last_stage && targets_waiting.erase(a.microbatch) > 0) boundary.remove(targets_bytes);
        output = stage_out[st];
        break;
      case pipeline::ActionKind::kBackwardInput:
      case pipeline::ActionKind::kBackward: {
        const bool fused = a.kind == pipeline::ActionKind::kBackward;
        const std::int64_t alive = boundary.in_flight() + sending;
        peak_stash = std::max(peak_stash, held + (fused ? sm.fused_peak : sm.input_peak) + alive);
        hold(fused ? sm.fused_transients : sm.input_transients, held + alive);
        boundary.take_backward(key);  // its dy, freed when the action ends
        held += fused ? -sm.forward_stash : sm.weight_stash - sm.forward_stash;
        output = stage_in[st];
        break;
      }
      case pipeline::ActionKind::kBackwardWeight:
        peak_stash = std::max(peak_stash, held + sm.weight_peak + boundary.in_flight() + sending);
        held -= sm.weight_stash;
        break;
      default: break;
    }
    peak_stash = std::max(peak_stash, held + boundary.in_flight() + sending + output);
    const bool forward = a.kind == pipeline::ActionKind::kForward;
    const bool was_sent = (forward ? sent.forward : sent.backward).count(key) > 0;
    sending = was_sent ? output : 0;
    // An output no SEND carries goes to a stage of this rank: held until that stage consumes it.
    if (output > 0 && !was_sent) {
      if (forward) boundary.hand_over_forward({a.stage + 1, a.microbatch}, output);
      else boundary.hand_over_backward({a.stage - 1, a.microbatch}, output);
    }
  }
  return {peak_stash, std::max(scale.bytes(peak_stash), peak_transients)};
}

}  // namespace cleave::run_plan
