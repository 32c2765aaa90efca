// Executor: a plain interpreter of one pp rank's lowered action list (docs/architecture.md) — a switch, no policy.
//
// Invariants:
//  - Consecutive SEND/RECV actions are posted together as one batch_p2p; a receive is waited for only by
//    the compute action that consumes it, and sends complete in the background (all are waited for at the
//    end of the step), so the executor never blocks earlier than the validated blocking dry run would. After
//    every action it tests (never waits on) its outstanding batches, so one that is done stops counting as
//    in flight for the MPI progress thread (engine/comm/mpi/progress_thread.hpp).
//  - The receives of the next communication block are posted with the current one, in a batch of their own
//    (the posting order is p2p_posting.hpp's, which the validator proves both ends of every pair agree on):
//    a message whose receive is already posted when it arrives is pulled by the receiver alone, while one that
//    arrives first ("unexpected") waited, under Open MPI even with single copy, for the sender's next MPI call
//    (interleaved 1F1B at pp2: 1-6 ms per message). Where sends do not progress on their own
//    (Communicator::sends_progress_on_their_own: no MPI progress thread, copy-in/copy-out), its consumer still
//    waits for the sends of the block the schedule put it in, as before: a rank in that wait drives its own
//    sends (1F1B lost a third of its speed when it did not).
//  - Shapes of received tensors come from the plan (`boundary_shape`) and their dtype from the context's
//    precision (bf16 boundary tensors under mixed precision), never from a handshake.
//  - A stage's stash is released by its W (or B) action, so live activations follow the schedule.
//  - Stages that sit on the same rank (ZB-V's turn) hand tensors over directly, without communication.
//  - The measured timeline books the wait for a received tensor as idle: a compute action's span starts when
//    its input is there, so gaps on a rank's timeline are its bubble. Spans are taken by events on the run's
//    stream (event_timeline.hpp): on a GPU they are device time, and gaps the stream's idle time.
//  - REDUCE_GRAD and OPTIMIZER_STEP run the caller's hooks in schedule order, so the step's tail is part of
//    the step (and of its measured timeline), not a second piece of code after it.
//  - In a schedule with overlapped F&B pairs (Schedule::overlap_fb_pairs, overlap_schedule.hpp; the key
//    parallel.moe_a2a_overlap) a pair's F and I (or B) take their inputs first and then run interleaved through
//    an OverlapPair (overlap_pair.hpp) installed as the context's comm waiter for the pair only: while one side's
//    MoE all-to-all is in flight the other computes. Their outputs are stored after both end. The timeline books
//    the pair's span split between the two in proportion to the time each held the rank.
//  - With a timeline recorded, the executor's TimedWaiter is the context's comm waiter during the step (and its
//    accumulators the overlapped pairs', layers/comm_wait.hpp): each compute span carries the time it blocked on tp, cp, ZeRO-3 gather and expert all-to-all
//    collectives (TimedAction::comm_wait), for `cleave plan --trial --explain`.
//  - kEvaluate runs a forward-only schedule (forward_only.hpp): nothing is stashed, and the last stage scores
//    its logits with the loss block's evaluate() (vocab-parallel under tp) instead of returning a loss.
//  - A steady-state step allocates nothing of the executor's own (docs/ops.md): the tensors in flight sit in
//    slots by (stage, micro-batch) and the fetched data in slots by micro-batch, all sized at construction; the
//    op and receive lists of a communication block and the step's outcome are members, cleared (not remade)
//    each time, so after the first step they keep their capacity; so are a recorded timeline's spans (reserved
//    for the rank's action count at construction) and the outcome's timeline, refilled in place.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "layers/comm_wait.hpp"
#include "pipeline/event_timeline.hpp"
#include "pipeline/overlap_pair.hpp"
#include "pipeline/p2p_posting.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/stage_module.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::pipeline {

// What the first and last stage read for one micro-batch.
struct MicrobatchData {
  Tensor inputs;   // token ids / features for stage 0
  Tensor targets;  // i32 targets for the loss
};

enum class ExecutorMode { kTrain, kEvaluate };

struct ExecutorOptions {
  ExecutorMode mode = ExecutorMode::kTrain;
  const Schedule* schedule = nullptr;      // lowered; only this rank's list is read
  int pp_rank = 0;
  comm::Communicator* pp_comm = nullptr;   // null when pp = 1; peers are pp ranks
  std::map<int, StageModule*> stages;      // the stages this rank holds, by stage index
  // Micro-batch boundary shape entering `stage` (stage > 0) — e.g. [micro_batch, T, D]; asked once per stage, at
  // construction.
  std::function<Shape(int stage)> boundary_shape;
  // Micro-batch `microbatch` of batch `batch` (run_step's argument); called on the ranks of the first and last
  // stage.
  std::function<MicrobatchData(std::int64_t batch, int microbatch)> data;
  float loss_scale = 1.0f;                 // dy of each micro-batch's mean loss (1 / micro-batches)
  std::function<void(int stage)> reduce_grads;  // REDUCE_GRAD: the stage's gradients are final (may be empty)
  std::function<void()> optimizer_step;         // OPTIMIZER_STEP: reduce, clip, update (may be empty)
  layers::Context* context = nullptr;
  bool record_timeline = false;
  // Called before each compute action (F, I, W, B) runs; may be empty. Instrumentation only: the failure
  // drills inject a fault here (engine/train/fault_injection.hpp). An exception it throws leaves the step
  // exactly as one thrown by a layer would.
  std::function<void(const Action&)> before_compute;
};

struct StepOutcome {
  // The mean loss of each micro-batch this rank computed, as (micro-batch, loss) in the order computed
  // (last stage only; empty elsewhere).
  std::vector<std::pair<int, float>> losses;
  std::vector<TimedAction> timeline;  // measured, in µs of the host's steady clock (device time on a GPU, see
                                      // event_timeline.hpp; same format as the simulator)
  std::int64_t p2p_bytes_sent = 0;    // bytes of the boundary tensors this rank sent (activations and gradients)
  int overlapped_pairs = 0;           // F&B pairs run interleaved (overlap_pair.hpp)
  int pair_hand_overs = 0;            // baton passes inside them (each is an all-to-all hidden or begun)
  // kEvaluate: the counts of each micro-batch this rank scored (last stage only), in the order computed.
  std::vector<std::pair<int, layers::EvalCounts>> evaluations;
};

class Executor {
 public:
  explicit Executor(ExecutorOptions options);
  // Runs this rank's action list once over batch `batch` (the training step, or the evaluation batch), which
  // the data callback receives. The outcome is the executor's own, valid until the next run_step (its vectors
  // are reused from step to step; a caller may take one, which the next step then remakes, or swap one of its own
  // in, whose capacity the next step reuses).
  StepOutcome& run_step(std::int64_t batch);

 private:
  // What one step gathers as it runs (run_step): its outcome and the losses still on the device. Kept by the
  // executor and reset at each step's start, so its vectors keep their capacity.
  struct StepState {
    void reset();

    StepOutcome outcome;
    // Each micro-batch's loss stays on the device (copied into one buffer on the stream) and is read back once,
    // after the step (finish_step): no host wait per micro-batch. `loss_microbatches[k]` is entry k's micro-batch.
    Tensor losses_device;
    std::vector<int> loss_microbatches;
    layers::CommWaiter* waiter = nullptr;  // the context's comm waiter for the step (an overlapped pair's between)
    EventTimeline::Waits waits_before{};   // the timed waiter's accumulators when the timed action began
  };

  StageModule& stage_module(const Action& a);  // asserts the rank holds a's stage
  // A forward's output: the last stage's loss into the step's loss buffer, any other stage's for its consumer.
  void store_forward(const Action& a, const Tensor& y, StepState& step);
  // I or B at list position `position`: the input gradient (B also accumulates the weight gradient).
  Tensor run_backward(const Action& a, std::size_t position, const Tensor& dy);
  void store_backward(const Action& a, const Tensor& dx);
  // The overlapped F&B pair at positions i, i + 1 (overlap_schedule.hpp): both inputs first, then the two
  // interleaved through pair_, installed as the context's comm waiter for the pair only.
  void run_overlapped_pair(std::size_t i, const std::vector<Action>& actions, StepState& step);
  // Compute or tail action `a` at position i; `start` (its timeline span's first mark) moves past the wait for a
  // peer's tensor, which is idle time, not compute.
  void run_compute(const Action& a, std::size_t i, int& start, StepState& step);
  // The collectives' wait times since step.waits_before, per kind (TimedAction::comm_wait).
  EventTimeline::Waits waits_since(const StepState& step) const;
  // Waits for every batch, closes the timeline, asserts nothing is left in flight, reads the losses back.
  void finish_step(StepState& step);
  void post_communication(std::size_t& index, const std::vector<Action>& actions, StepOutcome& outcome);
  // A posted receive: its buffer (undefined: none posted), the batch it is in, and for one posted a block early
  // the batch of the block the schedule put it in (whose sends its consumer waits for too, as it would have
  // without the early post).
  struct Received {
    Tensor tensor;
    comm::Work* work = nullptr;
    comm::Work* companion = nullptr;
  };
  // The slot of (stage, micro-batch) in the in-flight lists below (asserted in range).
  std::size_t slot(int stage, int microbatch) const;
  // Allocates the buffer of RECV `a`, adds its op to `ops` and its slot to `receives` (the Work is set once posted).
  void post_receive(const Action& a, std::vector<comm::P2POp>& ops, std::vector<Received*>& receives);
  Tensor forward_input(int stage, int microbatch);
  Tensor backward_dy(int stage, int microbatch);
  Tensor take_received(Received& slot);
  // Micro-batch `microbatch`'s inputs (stage 0's forward) or targets (the last stage's), each handed over once:
  // the entry is fetched at the first call and dropped when this rank's readers have taken both, so the data
  // lives as long as the stashes that keep it (the embedding's ids, the loss's targets), not to the step's end.
  Tensor take_data(int microbatch, bool inputs);
  int tag(ActionKind direction, int stage, int microbatch) const;

  ExecutorOptions options_;
  int last_stage_;
  std::map<int, std::size_t> final_weight_action_;  // stage -> index of its last W/B in this rank's list
  std::vector<Shape> boundary_shapes_;  // by stage: options_.boundary_shape(stage), asked once (stage > 0)
  Tensor loss_scale_tensor_;
  // Tensors in flight within one step, by slot(stage, micro-batch); an undefined tensor is an empty slot.
  std::vector<Tensor> forward_out_;     // stage output, until sent or consumed by a local next stage
  std::vector<Tensor> backward_out_;    // stage input gradient, until sent or consumed locally
  std::vector<Received> forward_in_;    // received activations
  std::vector<Received> backward_in_;   // received gradients
  std::int64_t batch_ = 0;              // run_step's batch, for the data callback
  // By micro-batch: fetched (this step), fields not yet taken (take_data).
  struct DataSlot {
    MicrobatchData data;
    bool fetched = false;
  };
  std::vector<DataSlot> data_;
  std::vector<comm::WorkPtr> works_;  // every batch posted this step (waited for at the end)
  // One communication block's lists (post_communication), cleared after each block.
  std::vector<comm::P2POp> ops_, early_ops_;
  std::vector<Received*> receives_, early_here_, early_receives_;
  StepState step_;  // run_step's
  std::map<std::size_t, P2PBlock> blocks_;  // this rank's communication blocks by first action (p2p_posting.hpp)
  layers::TimedWaiter timed_waiter_;  // record_timeline: the context's comm waiter during a step (comm_wait.hpp)
  EventTimeline timeline_;  // record_timeline: the step's spans, from events on the run's stream
  std::unique_ptr<OverlapPair> pair_;  // overlapped F&B pairs only
};

}  // namespace cleave::pipeline
