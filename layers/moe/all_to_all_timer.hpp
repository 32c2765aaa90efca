// The exposed wall time of an expert-parallel all-to-all, for the run's router log (moe_ep_all_to_all_ms, the
// imbalance benchmark's measured figure, split by kind and into the wait for the last peer and the exchange's own
// time by RouterMetrics): a scope timer the moe layer (moe_mlp.cpp) puts around each count exchange, dispatch and
// combine. Invariant: time the rank spent on a paired micro-batch while this one's exchange
// was in flight (an overlapped F&B pair, comm_wait.hpp) is not counted; nothing is added when the run keeps no log.
#pragma once

#include <chrono>
#include <string>

#include "layers/comm_wait.hpp"
#include "layers/layer.hpp"
#include "layers/moe/router_log.hpp"

namespace cleave::layers {

// Adds the wall time of the all-to-all in its scope to the run's router log (moe_ep_all_to_all_ms, the imbalance
// benchmark's measured figure); nothing when the run keeps no log. Time the rank spent on a paired micro-batch
// while this one's exchange was in flight (an overlapped F&B pair, comm_wait.hpp) is not counted: the figure is
// the exposed all-to-all time.
class AllToAllTimer {
 public:
  AllToAllTimer(const Context& ctx, const std::string& block, AllToAllKind kind)
      : ctx_(ctx), log_(ctx.router_log), block_(block), kind_(kind), start_(std::chrono::steady_clock::now()),
        handed_off_(seconds_handed_off(ctx)) {}
  ~AllToAllTimer() {
    if (log_ != nullptr) {
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      log_->add_all_to_all_time(block_, kind_, wall - (seconds_handed_off(ctx_) - handed_off_));
    }
  }
  AllToAllTimer(const AllToAllTimer&) = delete;
  AllToAllTimer& operator=(const AllToAllTimer&) = delete;

 private:
  const Context& ctx_;
  RouterLog* log_;
  const std::string& block_;
  AllToAllKind kind_;
  std::chrono::steady_clock::time_point start_;
  double handed_off_;
};

}  // namespace cleave::layers
