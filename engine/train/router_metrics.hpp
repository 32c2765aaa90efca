// The step metrics of mixture-of-experts models: every rank's RouterLog (layers/moe/router_log.hpp) summed over
// the world and turned into metrics.jsonl fields and the progress line's tail.
//
// Fields (only when the model has routed blocks, BlockSpec::n_experts > 0; nothing here names a family):
//   moe_aux_loss        the load-balancing loss added per micro-batch, summed over the blocks, averaged over the
//                       step's micro-batches (coefficient included)
//   moe_z_loss          the same for the router z-loss (only when z_loss_coef > 0)
//   moe_load_imbalance  max / mean tokens per expert of each block, averaged over the blocks (1 = balanced)
//   moe_tokens_e<i>     tokens routed to expert i in the step, summed over the blocks and the global batch
//   moe_ep_rows_b<i>_s<s>_d<d>, moe_ep_bytes_b<i>_s<s>_d<d>   expert parallelism only (ep > 1): the routed rows
//                       (and their bytes, rows × d_model × the activation dtype's size) ep rank s sent to ep rank d
//                       in routed block i's forward dispatch during the step, summed over the micro-batches and
//                       the expert-dp replicas (layers/moe/expert_dispatch.hpp; the combine returns the same
//                       counts, the backward moves them again). s = d is the part that stays on the rank.
//   moe_ep_mb_rows_b<i>_d<d>, moe_ep_mb_mean_rows_b<i>   expert parallelism only: the most rows ep rank d's
//                       experts received in routed block i's forward dispatch of one micro-batch of the step (the
//                       max over the micro-batches and the expert-dp replicas), and the mean rows per ep rank in one
//                       micro-batch (a rank's tokens × k); their ratio is the block's per-micro-batch imbalance on d,
//                       what the memory plan's figures bound (docs/planner.md "Expert parallelism's memory").
//   moe_ep_all_to_all_ms  expert parallelism only: a rank's time in the step's all-to-alls (count exchanges,
//                       dispatch and combine, forward and backward, all moe blocks; each waits for its slowest
//                       peer), the mean over the ranks (tp rank 0 of each tp group)
//   moe_ep_<kind>_ms, moe_ep_<kind>_wait_ms   the same split by kind (count_exchange, dispatch, combine,
//                       dispatch_grad, combine_grad: layers/moe/router_log.hpp) and, of each, the wait for the last
//                       peer: per call, a rank's time less the shortest time any rank of its ep group spent in that
//                       call (the last to arrive waits for nobody: its time is the exchange's own); the rest of a
//                       kind's time is the exchange's own. moe_ep_all_to_all_wait_ms: the waits of all kinds.
// Invariant: every rank calls finish() each step (a collective); tp ranks other than 0 contribute zeros, since
// every rank of a tp group routes the same tokens.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "kernels/ops/context.hpp"
#include "layers/moe/router_log.hpp"
#include "partition/model_spec.hpp"

namespace cleave::train {

class RouterMetrics {
 public:
  // The routed blocks of `spec` (none: a no-op).
  explicit RouterMetrics(const partition::ModelSpec& spec);
  bool active() const { return !blocks_.empty(); }
  layers::RouterLog& log() { return log_; }

  void begin_step() { log_.clear(); }
  // Sums the logs over `world` (collective when active) and returns the fields, kept here and valid until the next
  // finish (a warm step's finish allocates nothing: the list and its names are rewritten in place); counts only on
  // tp rank 0. Then
  // moves every selection bias this rank holds (RouterLog::note_bias) by its rate against the block's global
  // load of the step: b_e += rate · sign(mean - count_e) (DeepSeek-V3), the same on every rank holding it, and
  // refreshes its working copy. Call it after the optimizer step.
  // ep_size, ep_rank: this rank's place in its ep group (the moe_ep_* fields when ep_size > 1); `ep`: the group
  // (collective over it too, when it has 2 ranks or more and the step timed an all-to-all; null: no wait is told
  // apart, every wait field 0).
  std::span<const std::pair<std::string, double>> finish(comm::Communicator& world, int tp_rank,
                                                         const ops::Context& ctx, int ep_size = 1, int ep_rank = 0,
                                                         comm::Communicator* ep = nullptr);

 private:
  std::vector<std::string> blocks_;
  std::int64_t experts_ = 0;
  layers::RouterLog log_;
  std::vector<double> shortest_;  // the ep group's shortest time per all-to-all call of the step (finish)
  // finish's packed contribution, the world's sum, the tokens per expert and the fields it returns, kept from step
  // to step: a finish allocates nothing once warm.
  std::vector<double> mine_, sum_, tokens_, peak_mine_, peaks_;
  std::vector<std::pair<std::string, double>> fields_;
};

// Per kind of all-to-all (layers::AllToAllKind), a rank's seconds in the step's calls of that kind and, of them, the
// wait for the last peer. Each call's own time is taken as the shortest any rank of the ep group spent in it
// (`shortest[i]` for calls[i]: the last rank to arrive finds its peers there and waits for none), the rest of a
// rank's time in it as its wait (never below 0). Not exact: the last arrival's time still holds a message latency the
// others pay after it, so the own time is a floor. Throws Error when the two lengths differ.
struct AllToAllSplit {
  std::array<double, layers::kNumAllToAllKinds> seconds{}, wait{};
};
AllToAllSplit split_all_to_alls(const std::vector<layers::AllToAllCall>& calls, const std::vector<double>& shortest);

// " | aux 0.0123 | imbalance 1.31" for the progress line, appended to `out` (nothing without the fields); allocates
// nothing while `out` has room.
void append_router_progress(fmt::memory_buffer& out, const std::vector<std::pair<std::string, double>>& fields);

}  // namespace cleave::train
