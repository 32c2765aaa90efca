// OverlapPair: runs two pieces of work of one rank (an overlapped F&B pair: one micro-batch's forward and another
// stage's backward, pipeline/overlap_schedule.hpp) so that while one waits for a non-blocking exchange it posted
// (the MoE dispatch or combine all-to-all, layers/comm_wait.hpp) the other computes, as DeepSeek's DualPipe
// overlaps a forward chunk with a backward chunk.
//
// Design: a baton. `first` runs on the calling thread, `second` on a partner thread the pair owns; exactly one of
// them runs at any time. At a wait() the running side hands the baton to the other (if that one has not finished)
// and takes it back when the other waits or finishes; only then does it wait for its exchange, and that wait is
// the exposed communication time. The hand-over order is a pure function of the two sides' sequences of wait
// points, which are the same on every rank of an ep group (they run the same action list), so every rank posts
// its collectives in the same order, as MPI and NCCL require. Nothing runs concurrently, so the allocator, the
// router log and the stage modules are never touched by two threads at once.
//
// Invariants:
//  - Each side's own work runs in its own order; only the interleaving of the two changes: results are
//    bit-identical to running first then second (their inputs are ready before the pair starts and they write
//    disjoint state: different stages' stashes and gradients).
//  - A side that throws finishes the pair as if it had returned: the other side runs to its end, then run()
//    rethrows the first side's exception (else the second's).
//  - wait() from a thread that is not running a side of a pair is a plain work.wait().
//  - On a GPU the partner thread makes the run's device current before running (ops::make_device_current).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/core/device.hpp"
#include "layers/comm_wait.hpp"

namespace cleave::pipeline {

struct PairTimes {
  double first_seconds = 0.0;   // time the rank ran `first` (its compute and its exposed waits)
  double second_seconds = 0.0;  // the same for `second`
  int hand_overs = 0;           // baton passes inside the pair
};

class OverlapPair final : public layers::CommWaiter {
 public:
  explicit OverlapPair(Device device);
  ~OverlapPair() override;
  OverlapPair(const OverlapPair&) = delete;
  OverlapPair& operator=(const OverlapPair&) = delete;

  // Runs both to their end (see the header); returns how the rank's time split between them.
  PairTimes run(const std::function<void()>& first, const std::function<void()>& second);

  void wait(comm::Work& work) override;
  double seconds_handed_off() const override;
  // The accumulators CommWaitTimer adds to while the pair runs (the executor's, when it records a timeline).
  layers::CommWaitTimes* wait_times() const override { return wait_times_; }
  void set_wait_times(layers::CommWaitTimes* times) { wait_times_ = times; }

 private:
  int side_of_caller() const;  // 0 first, 1 second, -1 neither (not in a pair)
  void partner_loop();
  void hand_over(std::unique_lock<std::mutex>& lock, int me);  // gives the baton away, returns holding it again
  void finish_side(int me, std::exception_ptr error);

  Device device_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::thread partner_;
  std::thread::id sides_[2];
  const std::function<void()>* second_ = nullptr;  // the partner's job; null when none is pending
  bool active_ = false;
  bool stop_ = false;
  int turn_ = 0;  // who holds the baton
  bool done_[2] = {false, false};
  std::exception_ptr errors_[2];
  double handed_off_[2] = {0.0, 0.0};  // cumulative per side over the pair's life
  double own_time_[2] = {0.0, 0.0};    // this run: each side's time holding the baton
  double baton_since_ = 0.0;           // steady clock seconds when the current holder took it
  int hand_overs_ = 0;
  layers::CommWaitTimes* wait_times_ = nullptr;
};

}  // namespace cleave::pipeline
