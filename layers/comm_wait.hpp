// CommWaiter: how a layer waits for a non-blocking exchange it posted (the mixture-of-experts dispatch and combine
// all-to-alls, layers/moe/expert_dispatch.hpp). A layer posts, then calls wait_comm(ctx, work) where it needs the
// data; with no waiter in the context that is work.wait(). The pipeline executor installs one for its overlapped
// F&B pairs (pipeline/overlap_pair.hpp): the wait first hands the rank to the paired micro-batch, which computes
// until its own exchange is posted, and only then waits. So a wait point is a phase boundary of the layer: what
// comes before it (compute before dispatch, the experts) and after it (the experts, after combine) are the
// phases the executor interleaves with the other micro-batch's.
//
// Invariant: a waiter only changes which independent work runs while the exchange is in flight, never what is
// computed or in which order one micro-batch's own work runs, so results are bit-identical with and without it.
//
// Wait timing (`cleave plan --trial K --explain`, docs/planner.md "Predicted against measured, term by term"): the
// collectives a layer runs inside a compute action (tp all-reduce / reduce-scatter / all-gather, cp ring hops and
// all-to-alls, ZeRO-3's parameter gathers, the expert all-to-alls) are timed where the rank blocks on them: a
// CommWaitTimer around the posting and the wait adds the host time in its scope, less the time an overlapped pair
// handed the rank to its other micro-batch (seconds_handed_off), to one of a fixed array of accumulators, one per
// CommKind, in the CommWaitTimes of the context's waiter (CommWaiter::wait_times; no waiter, or none kept: nothing
// is timed). An executor that records a timeline installs a TimedWaiter for the step (and hands its accumulators
// to its overlapped pairs' waiter) and reads the array before and after each action, so each span of the measured timeline carries its own waits. No allocation, no
// device sync: a clock read at each end. Timer scopes never nest (each is one post-and-wait), so in an overlapped
// pair each side's timers count that side's own blocked time: the time the other side held the rank is handed-off
// time, subtracted. On a GPU with NCCL on a CUDA stream wait() returns at once (the wait is on the device), so the times
// there are only the host's posting time: the figures are the CPU (MPI) backend's, where wait() blocks the host.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <string_view>

#include "engine/comm/communicator.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {

// The kinds of collective a layer waits on inside a compute action, in the order of the accumulators.
enum class CommKind : int { kTensorParallel, kContextParallel, kZeroGather, kExpertAllToAll };
inline constexpr std::size_t kNumCommKinds = 4;

// "tp", "cp", "zero_gather", "expert_all_to_all": the measured rows' names and the trace's args keys (wait_<name>_us).
constexpr std::string_view comm_kind_name(CommKind kind) {
  constexpr std::array<std::string_view, kNumCommKinds> kNames = {"tp", "cp", "zero_gather", "expert_all_to_all"};
  return kNames[static_cast<std::size_t>(kind)];
}

// Cumulative seconds blocked per kind (never reset by the timers: readers take differences).
struct CommWaitTimes {
  std::array<double, kNumCommKinds> seconds{};
};


class CommWaiter {
 public:
  virtual ~CommWaiter() = default;
  // Returns once `work` is complete (rethrowing its error); may run other work first.
  virtual void wait(comm::Work& work) = 0;
  // Seconds the calling thread has so far spent handing the rank to other work inside wait() (cumulative): a
  // timer around an exchange subtracts the growth so it counts only this micro-batch's exposed time.
  virtual double seconds_handed_off() const = 0;
  // Where CommWaitTimer adds the time blocked per kind of collective; null: nothing is timed.
  virtual CommWaitTimes* wait_times() const { return nullptr; }
};

// A plain wait that keeps the accumulators: what the executor installs while it records a timeline.
class TimedWaiter final : public CommWaiter {
 public:
  void wait(comm::Work& work) override { work.wait(); }
  double seconds_handed_off() const override { return 0.0; }
  CommWaitTimes* wait_times() const override { return &times_; }
  const CommWaitTimes& times() const { return times_; }

 private:
  mutable CommWaitTimes times_;
};

inline void wait_comm(Context& ctx, comm::Work& work) {
  if (ctx.comm_waiter != nullptr) {
    ctx.comm_waiter->wait(work);
  } else {
    work.wait();
  }
}

inline double seconds_handed_off(const Context& ctx) {
  return ctx.comm_waiter != nullptr ? ctx.comm_waiter->seconds_handed_off() : 0.0;
}

// Adds the time in its scope, less what was handed to a paired micro-batch, to the waiter's accumulator of `kind`.
class CommWaitTimer {
 public:
  CommWaitTimer(const Context& ctx, CommKind kind)
      : times_(ctx.comm_waiter != nullptr ? ctx.comm_waiter->wait_times() : nullptr), kind_(kind) {
    if (times_ == nullptr) return;
    waiter_ = ctx.comm_waiter;
    handed_off_ = waiter_->seconds_handed_off();
    start_ = std::chrono::steady_clock::now();
  }
  ~CommWaitTimer() {
    if (times_ == nullptr) return;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double away = waiter_->seconds_handed_off() - handed_off_;
    times_->seconds[static_cast<std::size_t>(kind_)] += wall > away ? wall - away : 0.0;
  }
  CommWaitTimer(const CommWaitTimer&) = delete;
  CommWaitTimer& operator=(const CommWaitTimer&) = delete;

 private:
  CommWaitTimes* times_;
  CommKind kind_;
  CommWaiter* waiter_ = nullptr;
  double handed_off_ = 0.0;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace cleave::layers
