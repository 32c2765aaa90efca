// OverlapPair (overlap_pair.hpp): the baton between the two sides of an overlapped F&B pair.
#include "pipeline/overlap_pair.hpp"

#include <chrono>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::pipeline {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

OverlapPair::OverlapPair(Device device) : device_(device) {
  partner_ = std::thread([this] { partner_loop(); });
}

OverlapPair::~OverlapPair() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  partner_.join();
}

int OverlapPair::side_of_caller() const {
  if (!active_) return -1;
  const auto me = std::this_thread::get_id();
  if (me == sides_[0]) return 0;
  if (me == sides_[1]) return 1;
  return -1;
}

void OverlapPair::hand_over(std::unique_lock<std::mutex>& lock, int me) {
  const int other = 1 - me;
  if (done_[other]) return;  // nothing left to run beside this side: keep the baton
  const double t = now_seconds();
  own_time_[me] += t - baton_since_;
  turn_ = other;
  baton_since_ = t;
  ++hand_overs_;
  changed_.notify_all();
  changed_.wait(lock, [&] { return turn_ == me; });
  handed_off_[me] += now_seconds() - t;
}

void OverlapPair::wait(comm::Work& work) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const int me = side_of_caller();
    if (me >= 0) hand_over(lock, me);
  }
  work.wait();  // exposed: the other side is waiting or done
}

double OverlapPair::seconds_handed_off() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const int me = side_of_caller();
  return me >= 0 ? handed_off_[me] : 0.0;
}

void OverlapPair::finish_side(int me, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  const double t = now_seconds();
  own_time_[me] += t - baton_since_;
  baton_since_ = t;
  errors_[me] = std::move(error);
  done_[me] = true;
  turn_ = 1 - me;
  changed_.notify_all();
}

void OverlapPair::partner_loop() {
  bool device_current = false;
  for (;;) {
    const std::function<void()>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || (second_ != nullptr && turn_ == 1); });
      if (stop_) return;
      job = second_;
      second_ = nullptr;
    }
    std::exception_ptr error;
    try {
      if (!device_current) {  // the partner thread's launches go to the run's device (a no-op on the CPU)
        ops::make_device_current(device_);
        device_current = true;
      }
      (*job)();
    } catch (...) {
      error = std::current_exception();
    }
    finish_side(1, error);
  }
}

PairTimes OverlapPair::run(const std::function<void()>& first, const std::function<void()>& second) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CLEAVE_ASSERT(!active_, "OverlapPair::run while a pair is running");
    sides_[0] = std::this_thread::get_id();
    sides_[1] = partner_.get_id();
    active_ = true;
    turn_ = 0;
    done_[0] = done_[1] = false;
    errors_[0] = errors_[1] = nullptr;
    own_time_[0] = own_time_[1] = 0.0;
    hand_overs_ = 0;
    baton_since_ = now_seconds();
    second_ = &second;
  }
  std::exception_ptr error;
  try {
    first();
  } catch (...) {
    error = std::current_exception();
  }
  finish_side(0, error);
  PairTimes times;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_[1]; });
    active_ = false;
    times = {own_time_[0], own_time_[1], hand_overs_};
  }
  if (errors_[0]) std::rethrow_exception(errors_[0]);
  if (errors_[1]) std::rethrow_exception(errors_[1]);
  return times;
}

}  // namespace cleave::pipeline
