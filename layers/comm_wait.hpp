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
#pragma once

#include "engine/comm/communicator.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {

class CommWaiter {
 public:
  virtual ~CommWaiter() = default;
  // Returns once `work` is complete (rethrowing its error); may run other work first.
  virtual void wait(comm::Work& work) = 0;
  // Seconds the calling thread has so far spent handing the rank to other work inside wait() (cumulative): a
  // timer around an exchange subtracts the growth so it counts only this micro-batch's exposed time.
  virtual double seconds_handed_off() const = 0;
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

}  // namespace cleave::layers
