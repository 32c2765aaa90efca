// EventTimeline: one step's measured timeline (TimedAction spans in µs) taken with events on the run's stream
// (ops::DeviceEvent), so on a GPU a span is when the device ran the action, not when the host launched it.
//
// mark() records an event at the point the stream has reached; an action's span runs from one mark to a
// later one. finish() waits for the last mark (one host wait on a GPU, none on the CPU) and turns every mark
// into µs of the host's steady clock: the step's first mark (begin) is pinned to the host time at which it
// was recorded, every other mark is that plus its offset on the device's clock. On the CPU an event notes the
// host clock when recorded, so the timeline reads exactly as host clock readings did; on a GPU the gaps
// between spans are the stream's idle time (waiting for a peer, the host, or a host-side wait).
// Events are pooled and reused by later steps, and the spans, the marks' times and the caller's list are kept and
// refilled: a steady-state step creates no event and allocates nothing (docs/ops.md).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/ops/ops.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::pipeline {

class EventTimeline {
 public:
  // Room for a step of `actions` actions (one span each, at most 2 * actions + 1 marks), so even the first step
  // grows no list; optional (the lists grow as needed and keep their capacity).
  void reserve(std::size_t actions);
  // Starts a step's timeline on ctx's stream (ctx must outlive finish()).
  void begin(const ops::Context& ctx);
  // Marks the point ctx's stream has reached now; returns the mark's index.
  int mark();
  // Books `action` from mark `start` to mark `end`; `waits`: the seconds it was blocked on each kind of
  // collective (layers/comm_wait.hpp), carried into TimedAction::comm_wait in µs.
  using Waits = std::array<double, kNumCommWaitKinds>;
  void add(const Action& action, int start, int end, const Waits& waits = {});
  // An overlapped F&B pair (overlap_pair.hpp) between two marks: `first` gets the leading `first_share` of the
  // span and `second` the rest, so the rank's spans still tile its time (each side's share is the time it held
  // the rank).
  // The pair's waits are split in the same proportion (which side blocked is not told apart).
  void add_pair(const Action& first, const Action& second, int start, int end, double first_share,
                const Waits& waits = {});
  // Waits for the last mark and writes the booked spans into `out` in the order added (its earlier contents
  // replaced, its capacity kept).
  void finish(std::vector<TimedAction>& out);

 private:
  struct Span {
    Action action;
    int start = 0;
    int end = 0;
    double from = 0.0;  // the part of [start, end] the action covers (a pair's share)
    double to = 1.0;
    Waits waits{};  // seconds
  };
  const ops::Context* ctx_ = nullptr;
  std::vector<std::unique_ptr<ops::DeviceEvent>> events_;  // the pool; marks [0, used_) belong to this step
  int used_ = 0;
  double origin_us_ = 0.0;  // host steady clock at mark 0, µs
  std::vector<Span> spans_;
  std::vector<double> at_us_;  // finish(): each mark's time, µs (kept from step to step)
};

}  // namespace cleave::pipeline
