// Executor: see executor.hpp. The only decisions here are where a tensor comes from (data, a local
// neighbour stage, or a posted receive); the order of everything is the schedule's.
#include "pipeline/executor.hpp"

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/comm_wait.hpp"
#include "pipeline/overlap_schedule.hpp"

namespace cleave::pipeline {

static_assert(layers::kNumCommKinds == kNumCommWaitKinds, "one TimedAction::comm_wait entry per layers::CommKind");

Executor::Executor(ExecutorOptions options) : options_(std::move(options)) {
  CLEAVE_ASSERT(options_.schedule != nullptr && options_.context != nullptr, "executor needs a schedule and a context");
  CLEAVE_ASSERT(options_.schedule->is_lowered() || options_.schedule->pp_size == 1,
                "the executor runs lowered schedules");
  last_stage_ = options_.schedule->num_stages - 1;
  // Written on the run's stream, so on a GPU the host never touches device memory.
  loss_scale_tensor_ = Tensor::empty({1}, DType::kF32, MemoryCategory::kWorkspace, *options_.context->allocator);
  ops::fill(*options_.context, loss_scale_tensor_, options_.loss_scale);
  options_.context->loss_scale = options_.loss_scale;  // layers' own losses (layers/layer.hpp)
  const auto& actions = options_.schedule->ranks.at(static_cast<std::size_t>(options_.pp_rank));
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (frees_stash(actions[i].kind)) final_weight_action_[actions[i].stage] = i;
  }
  for (P2PBlock& block : p2p_blocks(actions)) blocks_.emplace(block.first, std::move(block));
  if (options_.mode == ExecutorMode::kTrain && count_overlapped_pairs(*options_.schedule) > 0) {
    pair_ = std::make_unique<OverlapPair>(options_.context->device);
  }
}

int Executor::tag(ActionKind direction, int stage, int microbatch) const {
  const int backward = (direction == ActionKind::kSendB || direction == ActionKind::kRecvB) ? 1 : 0;
  return (microbatch * options_.schedule->num_stages + stage) * 2 + backward;
}

Tensor Executor::take_data(int microbatch, bool inputs) {
  auto it = data_.find(microbatch);
  if (it == data_.end()) it = data_.emplace(microbatch, options_.data(batch_, microbatch)).first;
  Tensor& field = inputs ? it->second.inputs : it->second.targets;
  CLEAVE_ASSERT(field.defined(), "micro-batch {}: its {} were taken twice in one step", microbatch,
                inputs ? "inputs" : "targets");
  Tensor taken = std::move(field);
  field = Tensor();
  // Dropped once this rank's readers have taken theirs: a field no stage here reads is not kept either.
  const bool inputs_left = it->second.inputs.defined() && options_.stages.count(0) > 0;
  const bool targets_left = it->second.targets.defined() && options_.stages.count(last_stage_) > 0;
  if (!inputs_left && !targets_left) data_.erase(it);
  return taken;
}

void Executor::post_receive(const Action& a, std::vector<comm::P2POp>& ops, std::vector<ReceiveSlot>& receives) {
  const bool forward = a.kind == ActionKind::kRecvF;
  Tensor buffer = Tensor::empty(options_.boundary_shape(forward ? a.stage : a.stage + 1), options_.context->compute_dtype(),
                                MemoryCategory::kActivations, *options_.context->allocator);
  const int peer = options_.schedule->rank_of(forward ? a.stage - 1 : a.stage + 1);
  ops.push_back(comm::P2POp::recv(buffer, peer, tag(a.kind, a.stage, a.microbatch)));
  auto& slots = forward ? forward_in_ : backward_in_;
  slots[{a.stage, a.microbatch}] = Received{buffer, nullptr, nullptr};
  receives.emplace_back(&slots, Key{a.stage, a.microbatch});
}

void Executor::post_communication(std::size_t& index, const std::vector<Action>& actions, StepOutcome& outcome) {
  auto found = blocks_.find(index);
  CLEAVE_ASSERT(found != blocks_.end(), "action {} does not start a communication block", index);
  const P2PBlock& block = found->second;
  std::vector<comm::P2POp> ops;
  std::vector<ReceiveSlot> receives;
  std::vector<ReceiveSlot> early_here;  // this block's receives, posted with the previous block
  const Schedule& schedule = *options_.schedule;
  for (std::size_t i : block.posted_early) {
    const Action& a = actions[i];
    early_here.emplace_back(a.kind == ActionKind::kRecvF ? &forward_in_ : &backward_in_, Key{a.stage, a.microbatch});
  }
  for (std::size_t i : block.posted) {
    const Action& a = actions[i];
    const Key key{a.stage, a.microbatch};
    switch (a.kind) {
      case ActionKind::kSendF: {
        auto it = forward_out_.find(key);
        CLEAVE_ASSERT(it != forward_out_.end(), "{}: nothing to send (forward not run)", format_action(a));
        const int peer = schedule.rank_of(a.stage + 1);
        ops.push_back(comm::P2POp::send(it->second, peer, tag(a.kind, a.stage + 1, a.microbatch)));
        outcome.p2p_bytes_sent += static_cast<std::int64_t>(it->second.nbytes());
        // The batch's Work holds the tensor until the send completes (communicator.hpp), then frees it: sent
        // tensors are not kept to the end of the step (that had held every micro-batch's boundary tensor).
        forward_out_.erase(it);
        break;
      }
      case ActionKind::kSendB: {
        auto it = backward_out_.find(key);
        CLEAVE_ASSERT(it != backward_out_.end(), "{}: nothing to send (backward not run)", format_action(a));
        const int peer = schedule.rank_of(a.stage - 1);
        ops.push_back(comm::P2POp::send(it->second, peer, tag(a.kind, a.stage - 1, a.microbatch)));
        outcome.p2p_bytes_sent += static_cast<std::int64_t>(it->second.nbytes());
        backward_out_.erase(it);
        break;
      }
      case ActionKind::kRecvF:
      case ActionKind::kRecvB: post_receive(a, ops, receives); break;
      default:
        CLEAVE_ASSERT(false, "not a communication action: {}", format_action(a));
    }
  }
  CLEAVE_ASSERT(options_.pp_comm != nullptr, "schedule communicates but there is no pp communicator");
  if (!ops.empty()) {
    works_.push_back(options_.pp_comm->batch_p2p(std::move(ops), *options_.context->stream));
    for (auto& [slots, key] : receives) (*slots)[key].work = works_.back().get();
    for (auto& [slots, key] : early_here) {
      if (auto it = slots->find(key); it != slots->end()) it->second.companion = works_.back().get();
    }
  }
  // The next block's receives, now (see the header), in the order p2p_posting.hpp states.
  std::vector<comm::P2POp> early;
  std::vector<ReceiveSlot> early_receives;
  for (std::size_t i : block.next_receives) post_receive(actions[i], early, early_receives);
  if (!early.empty()) {
    works_.push_back(options_.pp_comm->batch_p2p(std::move(early), *options_.context->stream));
    for (auto& [slots, key] : early_receives) (*slots)[key].work = works_.back().get();
  }
  index = block.end;
}

Tensor Executor::take_received(std::map<Key, Received>& slots, const Key& key) {
  auto it = slots.find(key);
  if (it == slots.end()) return Tensor();
  it->second.work->wait();
  if (it->second.companion != nullptr && !options_.pp_comm->sends_progress_on_their_own()) it->second.companion->wait();
  Tensor t = it->second.tensor;
  slots.erase(it);
  return t;
}

Tensor Executor::forward_input(int stage, int microbatch) {
  if (stage == 0) return take_data(microbatch, /*inputs=*/true);
  if (Tensor received = take_received(forward_in_, {stage, microbatch}); received.defined()) return received;
  auto it = forward_out_.find({stage - 1, microbatch});
  CLEAVE_ASSERT(it != forward_out_.end(), "stage {} micro-batch {}: input neither received nor local", stage,
                microbatch);
  Tensor x = it->second;
  forward_out_.erase(it);
  return x;
}

Tensor Executor::backward_dy(int stage, int microbatch) {
  if (stage == last_stage_) return loss_scale_tensor_;
  if (Tensor received = take_received(backward_in_, {stage, microbatch}); received.defined()) return received;
  auto it = backward_out_.find({stage + 1, microbatch});
  CLEAVE_ASSERT(it != backward_out_.end(), "stage {} micro-batch {}: output gradient neither received nor local",
                stage, microbatch);
  Tensor dy = it->second;
  backward_out_.erase(it);
  return dy;
}

StageModule& Executor::stage_module(const Action& a) {
  auto it = options_.stages.find(a.stage);
  CLEAVE_ASSERT(it != options_.stages.end(), "rank {} has no stage {} for {}", options_.pp_rank, a.stage,
                format_action(a));
  return *it->second;
}

void Executor::store_forward(const Action& a, const Tensor& y, StepState& step) {
  if (a.stage != last_stage_) {
    forward_out_[{a.stage, a.microbatch}] = y;
    return;
  }
  CLEAVE_ASSERT(y.numel() == 1 && y.dtype() == DType::kF32, "stage {} returned a loss {} {}, not one f32", a.stage,
                y.shape().str(), dtype_name(y.dtype()));
  layers::Context& ctx = *options_.context;
  if (!step.losses_device.defined()) {
    step.losses_device = Tensor::empty({options_.schedule->num_microbatches}, DType::kF32, MemoryCategory::kWorkspace,
                                       *ctx.allocator);
  }
  const auto k = static_cast<std::int64_t>(step.loss_microbatches.size());
  ops::copy(ctx, y.view(Shape{1}), step.losses_device.slice(k, k + 1));
  step.loss_microbatches.push_back(a.microbatch);
}

Tensor Executor::run_backward(const Action& a, std::size_t position, const Tensor& dy) {
  StageModule& stage = stage_module(a);
  layers::Context& ctx = *options_.context;
  return a.kind == ActionKind::kBackward ? stage.backward(a.microbatch, dy, ctx, final_weight_action_[a.stage] == position)
                                         : stage.backward_input(a.microbatch, dy, ctx);
}

void Executor::store_backward(const Action& a, const Tensor& dx) {
  if (a.stage > 0) backward_out_[{a.stage, a.microbatch}] = dx;
}

EventTimeline::Waits Executor::waits_since(const StepState& step) const {
  const layers::CommWaitTimes& wait_times = timed_waiter_.times();
  EventTimeline::Waits d{};
  for (std::size_t k = 0; k < d.size(); ++k) d[k] = wait_times.seconds[k] - step.waits_before[k];
  return d;
}

void Executor::run_overlapped_pair(std::size_t i, const std::vector<Action>& actions, StepState& step) {
  const Action& a = actions[i];
  const Action& b = actions[i + 1];
  layers::Context& ctx = *options_.context;
  const bool timed = options_.record_timeline;
  if (options_.before_compute) {
    options_.before_compute(a);
    options_.before_compute(b);
  }
  StageModule& forward_stage = stage_module(a);
  Tensor x = forward_input(a.stage, a.microbatch);
  Tensor dy = backward_dy(b.stage, b.microbatch);
  const int start = timed ? timeline_.mark() : 0;  // waiting for a peer's tensor is idle, not compute
  step.waits_before = timed_waiter_.times().seconds;
  const Tensor targets = a.stage == last_stage_ ? take_data(a.microbatch, /*inputs=*/false) : Tensor{};
  Tensor y, dx;
  ctx.comm_waiter = pair_.get();
  PairTimes times;
  try {
    times = pair_->run([&] { y = forward_stage.forward(a.microbatch, x, targets, ctx); },
                       [&] { dx = run_backward(b, i + 1, dy); });
  } catch (...) {
    ctx.comm_waiter = step.waiter;
    throw;
  }
  ctx.comm_waiter = step.waiter;
  store_forward(a, y, step);
  store_backward(b, dx);
  ++step.outcome.overlapped_pairs;
  step.outcome.pair_hand_overs += times.hand_overs;
  if (timed) {
    const double total = times.first_seconds + times.second_seconds;
    timeline_.add_pair(a, b, start, timeline_.mark(), total > 0 ? times.first_seconds / total : 0.5, waits_since(step));
  }
}

void Executor::run_compute(const Action& a, std::size_t i, int& start, StepState& step) {
  layers::Context& ctx = *options_.context;
  const bool timed = options_.record_timeline;
  switch (a.kind) {
    case ActionKind::kForward: {
      StageModule& stage = stage_module(a);
      Tensor x = forward_input(a.stage, a.microbatch);
      if (timed) start = timeline_.mark();  // waiting for a peer's tensor is idle, not compute
      const Tensor targets = a.stage == last_stage_ ? take_data(a.microbatch, /*inputs=*/false) : Tensor{};
      if (options_.mode == ExecutorMode::kEvaluate) {
        if (a.stage == last_stage_) {
          step.outcome.evaluations.emplace_back(a.microbatch, stage.evaluate(x, targets, ctx));
        } else {
          forward_out_[{a.stage, a.microbatch}] = stage.infer(x, ctx);
        }
        break;
      }
      store_forward(a, stage.forward(a.microbatch, x, targets, ctx), step);
      break;
    }
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward: {
      (void)stage_module(a);  // the stage is this rank's (asserted) before waiting for its gradient
      Tensor dy = backward_dy(a.stage, a.microbatch);
      if (timed) start = timeline_.mark();  // waiting for a peer's tensor is idle, not compute
      store_backward(a, run_backward(a, i, dy));
      break;
    }
    case ActionKind::kBackwardWeight:
      stage_module(a).backward_weight(a.microbatch, ctx, final_weight_action_[a.stage] == i);
      break;
    case ActionKind::kReduceGrad:
      if (options_.reduce_grads) options_.reduce_grads(a.stage);
      break;
    case ActionKind::kOptimizerStep:
      if (options_.optimizer_step) options_.optimizer_step();
      break;
    default:
      CLEAVE_ASSERT(false, "unexpected action {}", format_action(a));
  }
}

void Executor::finish_step(StepState& step) {
  for (auto& work : works_) work->wait();
  if (options_.record_timeline) step.outcome.timeline = timeline_.finish();
  CLEAVE_ASSERT(forward_in_.empty() && backward_in_.empty() && forward_out_.empty() && backward_out_.empty(),
                "rank {}: tensors left in flight at the end of the step (the schedule is not closed)",
                options_.pp_rank);
  works_.clear();
  data_.clear();
  if (!step.loss_microbatches.empty()) {  // the one read-back of the step's losses
    const auto count = static_cast<std::int64_t>(step.loss_microbatches.size());
    const std::vector<float> values = ops::to_host(*options_.context, step.losses_device.slice(0, count)).to_floats();
    step.outcome.losses.reserve(step.loss_microbatches.size());
    for (std::size_t k = 0; k < step.loss_microbatches.size(); ++k) {
      step.outcome.losses.emplace_back(step.loss_microbatches[k], values[k]);
    }
  }
}

StepOutcome Executor::run_step(std::int64_t batch) {
  batch_ = batch;
  StepState step;
  const auto& actions = options_.schedule->ranks.at(static_cast<std::size_t>(options_.pp_rank));
  layers::Context& ctx = *options_.context;
  // The measured timeline: marks on the run's stream (event_timeline.hpp), so on a GPU each span is device time.
  const bool timed = options_.record_timeline;
  if (timed) timeline_.begin(ctx);
  // The waits on collectives inside each action (layers/comm_wait.hpp): the timed waiter's accumulators, read
  // before and after the action (a fixed array: nothing allocated, no sync).
  layers::CommWaiter* const outer_waiter = ctx.comm_waiter;
  if (timed && outer_waiter == nullptr) ctx.comm_waiter = &timed_waiter_;
  struct RestoreWaiter {
    layers::Context& ctx;
    layers::CommWaiter* saved;
    ~RestoreWaiter() { ctx.comm_waiter = saved; }
  } restore_waiter{ctx, outer_waiter};
  step.waiter = ctx.comm_waiter;
  if (pair_) pair_->set_wait_times(step.waiter != nullptr ? step.waiter->wait_times() : nullptr);
  for (std::size_t i = 0; i < actions.size();) {
    const Action& a = actions[i];
    int start = timed ? timeline_.mark() : 0;
    if (is_communication(a.kind)) {
      const std::size_t first = i;
      post_communication(i, actions, step.outcome);
      if (timed) {  // one post for the whole batch: its time is booked on the first action
        const int end = timeline_.mark();
        for (std::size_t j = first; j < i; ++j) timeline_.add(actions[j], j == first ? start : end, end);
      }
      continue;
    }
    if (pair_ && starts_overlapped_pair(*options_.schedule, options_.pp_rank, i)) {
      // An overlapped F&B pair (overlap_schedule.hpp): both inputs first, then the two interleaved.
      run_overlapped_pair(i, actions, step);
      for (auto& work : works_) work->test();
      i += 2;
      continue;
    }
    if (options_.before_compute && is_compute(a.kind)) options_.before_compute(a);
    step.waits_before = timed_waiter_.times().seconds;  // (the waits for a peer's tensor are not collectives: not timed)
    run_compute(a, i, start, step);
    if (timed) timeline_.add(a, start, timeline_.mark(), waits_since(step));
    // Completes what has arrived or left (a test each, no wait), so a transfer still counted as outstanding is
    // one really in flight; the MPI progress thread polls only while there is one.
    for (auto& work : works_) work->test();
    ++i;
  }
  finish_step(step);
  return std::move(step.outcome);
}

}  // namespace cleave::pipeline
