// Executor: see executor.hpp. The only decisions here are where a tensor comes from (data, a local
// neighbour stage, or a posted receive); the order of everything is the schedule's.
#include "pipeline/executor.hpp"

#include <algorithm>
#include <span>
#include <type_traits>
#include <utility>

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
  // The step's slots, sized once (no allocation per step: executor.hpp).
  const auto slots = static_cast<std::size_t>(options_.schedule->num_stages) *
                     static_cast<std::size_t>(options_.schedule->num_microbatches);
  forward_out_.resize(slots);
  backward_out_.resize(slots);
  forward_in_.resize(slots);
  backward_in_.resize(slots);
  data_.resize(static_cast<std::size_t>(options_.schedule->num_microbatches));
  // Each boundary's shape, asked once (the plan builds it through lists).
  boundary_shapes_.resize(static_cast<std::size_t>(options_.schedule->num_stages));
  for (int stage = 1; stage < options_.schedule->num_stages && options_.boundary_shape; ++stage) {
    boundary_shapes_[static_cast<std::size_t>(stage)] = options_.boundary_shape(stage);
  }
  // Written on the run's stream, so on a GPU the host never touches device memory.
  loss_scale_tensor_ = Tensor::empty({1}, DType::kF32, MemoryCategory::kWorkspace, *options_.context->allocator);
  ops::fill(*options_.context, loss_scale_tensor_, options_.loss_scale);
  options_.context->loss_scale = options_.loss_scale;  // layers' own losses (layers/layer.hpp)
  const auto& actions = options_.schedule->ranks.at(static_cast<std::size_t>(options_.pp_rank));
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (frees_stash(actions[i].kind)) final_weight_action_[actions[i].stage] = i;
  }
  for (P2PBlock& block : p2p_blocks(actions)) blocks_.emplace(block.first, std::move(block));
  if (options_.record_timeline) {  // one span per action: the step's lists sized once
    timeline_.reserve(actions.size());
    step_.outcome.timeline.reserve(actions.size());
  }
  if (options_.mode == ExecutorMode::kTrain && count_overlapped_pairs(*options_.schedule) > 0) {
    pair_ = std::make_unique<OverlapPair>(options_.context->device);
  }
}

int Executor::tag(ActionKind direction, int stage, int microbatch) const {
  const int backward = (direction == ActionKind::kSendB || direction == ActionKind::kRecvB) ? 1 : 0;
  return (microbatch * options_.schedule->num_stages + stage) * 2 + backward;
}

std::size_t Executor::slot(int stage, int microbatch) const {
  CLEAVE_ASSERT(stage >= 0 && stage < options_.schedule->num_stages && microbatch >= 0 &&
                    microbatch < options_.schedule->num_microbatches,
                "stage {} micro-batch {} is outside the schedule's {} stages and {} micro-batches", stage, microbatch,
                options_.schedule->num_stages, options_.schedule->num_microbatches);
  return static_cast<std::size_t>(stage) * static_cast<std::size_t>(options_.schedule->num_microbatches) +
         static_cast<std::size_t>(microbatch);
}

Tensor Executor::take_data(int microbatch, bool inputs) {
  CLEAVE_ASSERT(microbatch >= 0 && static_cast<std::size_t>(microbatch) < data_.size(),
                "micro-batch {} is outside the schedule's {}", microbatch, data_.size());
  DataSlot& entry = data_[static_cast<std::size_t>(microbatch)];
  if (!entry.fetched) {
    entry.data = options_.data(batch_, microbatch);
    entry.fetched = true;
  }
  Tensor& field = inputs ? entry.data.inputs : entry.data.targets;
  CLEAVE_ASSERT(field.defined(), "micro-batch {}: its {} were taken twice in one step", microbatch,
                inputs ? "inputs" : "targets");
  Tensor taken = std::move(field);
  field = Tensor();
  // Dropped once this rank's readers have taken theirs: a field no stage here reads is not kept either.
  const bool inputs_left = entry.data.inputs.defined() && options_.stages.count(0) > 0;
  const bool targets_left = entry.data.targets.defined() && options_.stages.count(last_stage_) > 0;
  if (!inputs_left && !targets_left) entry = DataSlot{};
  return taken;
}

void Executor::post_receive(const Action& a, std::vector<comm::P2POp>& ops, std::vector<Received*>& receives) {
  const bool forward = a.kind == ActionKind::kRecvF;
  const int boundary = forward ? a.stage : a.stage + 1;
  CLEAVE_ASSERT(boundary > 0 && boundary < options_.schedule->num_stages, "{}: no boundary before stage {}",
                format_action(a), boundary);
  Tensor buffer = Tensor::empty(boundary_shapes_[static_cast<std::size_t>(boundary)], options_.context->compute_dtype(),
                                MemoryCategory::kActivations, *options_.context->allocator);
  const int peer = options_.schedule->rank_of(forward ? a.stage - 1 : a.stage + 1);
  ops.push_back(comm::P2POp::recv(buffer, peer, tag(a.kind, a.stage, a.microbatch)));
  Received& received = (forward ? forward_in_ : backward_in_)[slot(a.stage, a.microbatch)];
  received = Received{buffer, nullptr, nullptr};
  receives.push_back(&received);
}

void Executor::post_communication(std::size_t& index, const std::vector<Action>& actions, StepOutcome& outcome) {
  auto found = blocks_.find(index);
  CLEAVE_ASSERT(found != blocks_.end(), "action {} does not start a communication block", index);
  const P2PBlock& block = found->second;
  // The block's lists are members (executor.hpp), cleared at the end in the order the local lists they replace
  // were destroyed, so tensors are released at the same points as before (and here, after a block that threw).
  for (auto* list : {&receives_, &early_here_, &early_receives_}) list->clear();
  ops_.clear();
  early_ops_.clear();
  std::vector<comm::P2POp>& ops = ops_;
  std::vector<Received*>& receives = receives_;
  std::vector<Received*>& early_here = early_here_;  // this block's receives, posted with the previous block
  const Schedule& schedule = *options_.schedule;
  for (std::size_t i : block.posted_early) {
    const Action& a = actions[i];
    early_here.push_back(&(a.kind == ActionKind::kRecvF ? forward_in_ : backward_in_)[slot(a.stage, a.microbatch)]);
  }
  for (std::size_t i : block.posted) {
    const Action& a = actions[i];
    switch (a.kind) {
      case ActionKind::kSendF: {
        Tensor& out = forward_out_[slot(a.stage, a.microbatch)];
        CLEAVE_ASSERT(out.defined(), "{}: nothing to send (forward not run)", format_action(a));
        const int peer = schedule.rank_of(a.stage + 1);
        ops.push_back(comm::P2POp::send(out, peer, tag(a.kind, a.stage + 1, a.microbatch)));
        outcome.p2p_bytes_sent += static_cast<std::int64_t>(out.nbytes());
        // The batch's Work holds the tensor until the send completes (communicator.hpp), then frees it: sent
        // tensors are not kept to the end of the step (that had held every micro-batch's boundary tensor).
        out = Tensor();
        break;
      }
      case ActionKind::kSendB: {
        Tensor& out = backward_out_[slot(a.stage, a.microbatch)];
        CLEAVE_ASSERT(out.defined(), "{}: nothing to send (backward not run)", format_action(a));
        const int peer = schedule.rank_of(a.stage - 1);
        ops.push_back(comm::P2POp::send(out, peer, tag(a.kind, a.stage - 1, a.microbatch)));
        outcome.p2p_bytes_sent += static_cast<std::int64_t>(out.nbytes());
        out = Tensor();
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
    works_.push_back(options_.pp_comm->batch_p2p(std::span<const comm::P2POp>(ops), *options_.context->stream));
    for (Received* r : receives) r->work = works_.back().get();
    for (Received* r : early_here) {
      if (r->tensor.defined()) r->companion = works_.back().get();
    }
  }
  // The next block's receives, now (see the header), in the order p2p_posting.hpp states.
  std::vector<comm::P2POp>& early = early_ops_;
  std::vector<Received*>& early_receives = early_receives_;
  for (std::size_t i : block.next_receives) post_receive(actions[i], early, early_receives);
  if (!early.empty()) {
    works_.push_back(options_.pp_comm->batch_p2p(std::span<const comm::P2POp>(early), *options_.context->stream));
    for (Received* r : early_receives) r->work = works_.back().get();
  }
  early_receives.clear();
  early.clear();
  early_here.clear();
  receives.clear();
  ops.clear();
  index = block.end;
}

Tensor Executor::take_received(Received& slot) {
  if (!slot.tensor.defined()) return Tensor();
  slot.work->wait();
  if (slot.companion != nullptr && !options_.pp_comm->sends_progress_on_their_own()) slot.companion->wait();
  Tensor t = std::move(slot.tensor);
  slot = Received{};
  return t;
}

Tensor Executor::forward_input(int stage, int microbatch) {
  if (stage == 0) return take_data(microbatch, /*inputs=*/true);
  if (Tensor received = take_received(forward_in_[slot(stage, microbatch)]); received.defined()) return received;
  Tensor& local = forward_out_[slot(stage - 1, microbatch)];
  CLEAVE_ASSERT(local.defined(), "stage {} micro-batch {}: input neither received nor local", stage, microbatch);
  return std::exchange(local, Tensor());
}

Tensor Executor::backward_dy(int stage, int microbatch) {
  if (stage == last_stage_) return loss_scale_tensor_;
  if (Tensor received = take_received(backward_in_[slot(stage, microbatch)]); received.defined()) return received;
  Tensor& local = backward_out_[slot(stage + 1, microbatch)];
  CLEAVE_ASSERT(local.defined(), "stage {} micro-batch {}: output gradient neither received nor local", stage,
                microbatch);
  return std::exchange(local, Tensor());
}

StageModule& Executor::stage_module(const Action& a) {
  auto it = options_.stages.find(a.stage);
  CLEAVE_ASSERT(it != options_.stages.end(), "rank {} has no stage {} for {}", options_.pp_rank, a.stage,
                format_action(a));
  return *it->second;
}

void Executor::store_forward(const Action& a, const Tensor& y, StepState& step) {
  if (a.stage != last_stage_) {
    forward_out_[slot(a.stage, a.microbatch)] = y;
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
  if (a.stage > 0) backward_out_[slot(a.stage, a.microbatch)] = dx;
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
          forward_out_[slot(a.stage, a.microbatch)] = stage.infer(x, ctx);
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
  if (options_.record_timeline) timeline_.finish(step.outcome.timeline);
  const auto in_flight = [](const auto& slots) {
    return std::any_of(slots.begin(), slots.end(), [](const auto& s) {
      if constexpr (std::is_same_v<std::decay_t<decltype(s)>, Tensor>) return s.defined();
      else return s.tensor.defined();
    });
  };
  CLEAVE_ASSERT(!in_flight(forward_in_) && !in_flight(backward_in_) && !in_flight(forward_out_) &&
                    !in_flight(backward_out_),
                "rank {}: tensors left in flight at the end of the step (the schedule is not closed)",
                options_.pp_rank);
  works_.clear();
  for (DataSlot& entry : data_) entry = DataSlot{};
  if (!step.loss_microbatches.empty()) {  // the one read-back of the step's losses
    const auto count = static_cast<std::int64_t>(step.loss_microbatches.size());
    const Tensor values = ops::to_host(*options_.context, step.losses_device.slice(0, count));
    const std::span<const float> read = values.span<float>();
    for (std::size_t k = 0; k < step.loss_microbatches.size(); ++k) {
      step.outcome.losses.emplace_back(step.loss_microbatches[k], read[k]);
    }
  }
  step.losses_device = Tensor();  // freed here, as when the step's state was a local of run_step
}

void Executor::StepState::reset() {
  outcome.losses.clear();
  outcome.timeline.clear();
  outcome.evaluations.clear();
  outcome.p2p_bytes_sent = 0;
  outcome.overlapped_pairs = 0;
  outcome.pair_hand_overs = 0;
  losses_device = Tensor();
  loss_microbatches.clear();
  waiter = nullptr;
  waits_before = {};
}

StepOutcome& Executor::run_step(std::int64_t batch) {
  batch_ = batch;
  StepState& step = step_;
  step.reset();
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
  return step.outcome;
}

}  // namespace cleave::pipeline
