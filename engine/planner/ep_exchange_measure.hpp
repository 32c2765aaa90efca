// measure_ep_exchange: the expert dispatch's row exchange itself, timed by `cleave profile` at the model's own sizes
// (partition::MeasuredCosts::ep_exchange; docs/planner.md, "Expert parallelism"). The call is the trainer's:
// comm all_to_all_v over every rank of `comm`, each rank's rows split evenly over the ranks, its own share included
// (layers/moe/expert_dispatch.cpp), every rank sending and receiving at once; the sizes are the routed rows of a
// micro-batch (b · T · k rows of D values) of the model's largest moe block at the largest requested micro-batch, X,
// and X / 2 and 2 X (the busiest rank's rows reach the dropless bound, 2 X at ep 2), interleaved over `rounds` of
// `repeats` calls after one warm-up each. Each call as the trainer makes it after a pass's compute: `cold`, the
// caches evicted first (CacheEvictor: the receive buffer and the transport's shared-memory buffers come from
// memory), then the rows to send written (the gather before a dispatch leaves them in cache), then a barrier, so
// every rank arrives together and the time is the exchange's own (the trainer's moe_ep_<kind>_ms less its wait for
// the last peer). The median per size, mean over the ranks, fitted as latency + bytes / bandwidth
// (partition::fit_alpha_beta). Invariant: every rank runs the same sequence of calls and barriers (one split and one
// all-reduce per group size); nothing is measured (empty) for a model without routed experts or on one rank, alike
// on every rank.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "partition/measured_costs.hpp"
#include "partition/model_spec.hpp"

namespace cleave::planner {

// One size of the exchange: rows of `width` values of `bytes_per_value` each, per rank.
struct EpExchangeSize {
  std::int64_t rows = 0, width = 0, bytes_per_value = 4;
  double bytes() const { return static_cast<double>(rows * width * bytes_per_value); }
};

// The sizes measure_ep_exchange times for `spec` at the requested micro-batches: X / 2, X, 2 X rows of the moe block
// with the most routed bytes per micro-batch (b · T · k · D · bytes_per_value); empty without routed experts.
std::vector<EpExchangeSize> ep_exchange_sizes(const partition::ModelSpec& spec,
                                              const std::vector<std::int64_t>& micro_batches,
                                              std::int64_t bytes_per_value);

// One fit per group size: groups of 2, 4, ... consecutive ranks of `world` and the whole world, every group at
// once (as measure_collectives), the median per size averaged over the world's ranks.
std::vector<partition::AlphaBeta> measure_ep_exchange(comm::Communicator& world,
                                                     const std::vector<EpExchangeSize>& sizes, int rounds, bool cold,
                                                     int repeats = 20);

}  // namespace cleave::planner
