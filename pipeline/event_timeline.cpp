// EventTimeline (event_timeline.hpp).
#include "pipeline/event_timeline.hpp"

#include <chrono>

#include "engine/core/error.hpp"

namespace cleave::pipeline {
namespace {

double host_now_us() {
  using namespace std::chrono;
  return static_cast<double>(duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()) * 1e-3;
}

}  // namespace

void EventTimeline::reserve(std::size_t actions) {
  spans_.reserve(actions);
  at_us_.reserve(2 * actions + 1);
}

void EventTimeline::begin(const ops::Context& ctx) {
  ctx_ = &ctx;
  used_ = 0;
  spans_.clear();
  origin_us_ = host_now_us();
  mark();
}

int EventTimeline::mark() {
  CLEAVE_ASSERT(ctx_ != nullptr, "EventTimeline::mark before begin");
  if (used_ == static_cast<int>(events_.size())) events_.push_back(ops::make_device_event(ctx_->device));
  events_[static_cast<std::size_t>(used_)]->record(*ctx_->stream);
  return used_++;
}

void EventTimeline::add(const Action& action, int start, int end, const Waits& waits) {
  CLEAVE_ASSERT(0 <= start && start <= end && end < used_, "EventTimeline: span [{}, {}] of {} marks", start, end,
                used_);
  spans_.push_back({action, start, end, 0.0, 1.0, waits});
}

void EventTimeline::add_pair(const Action& first, const Action& second, int start, int end, double first_share,
                             const Waits& waits) {
  CLEAVE_ASSERT(0 <= start && start <= end && end < used_ && first_share >= 0.0 && first_share <= 1.0,
                "EventTimeline: pair [{}, {}] of {} marks, share {}", start, end, used_, first_share);
  spans_.push_back({first, start, end, 0.0, first_share, waits});
  spans_.push_back({second, start, end, first_share, 1.0, waits});
}

void EventTimeline::finish(std::vector<TimedAction>& out) {
  CLEAVE_ASSERT(ctx_ != nullptr && used_ > 0, "EventTimeline::finish before begin");
  events_[static_cast<std::size_t>(used_ - 1)]->synchronize();
  const ops::DeviceEvent& origin = *events_.front();
  at_us_.assign(static_cast<std::size_t>(used_), origin_us_);
  for (int k = 1; k < used_; ++k) {
    const std::size_t i = static_cast<std::size_t>(k);
    at_us_[i] = origin_us_ + 1e3 * events_[i]->elapsed_ms_since(origin);
  }
  out.clear();
  out.reserve(spans_.size());
  for (const Span& s : spans_) {
    const double a = at_us_[static_cast<std::size_t>(s.start)], b = at_us_[static_cast<std::size_t>(s.end)];
    TimedAction t{s.action, a + s.from * (b - a), a + s.to * (b - a), {}};
    for (std::size_t k = 0; k < t.comm_wait.size(); ++k) t.comm_wait[k] = s.waits[k] * (s.to - s.from) * 1e6;  // s -> µs
    out.push_back(t);
  }
  spans_.clear();
  ctx_ = nullptr;
}

}  // namespace cleave::pipeline
