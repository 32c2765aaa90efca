// The pure parts of `cleave profile`'s routing-imbalance measurement (the run itself, a Trainer, is
// engine/cli/profile_routing.cpp): the config it trains (the config's model, data, batch and seed at ep = dp = the
// profile's ranks, nothing else split), one step's figure from the trainer's routing fields, and the record the profile
// keeps (partition::MeasuredRoutingImbalance).
// Invariant: a step's figure is the quantity benchmarks/moe/ep_waits.py calls busiest_over_mean: per moe block the rows
// each ep rank received in the step (moe_ep_rows_b<i>_s<s>_d<d> summed over the sources s), max / mean - 1, meaned over
// the blocks, plus 1.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.hpp"
#include "partition/routing_imbalance.hpp"

namespace cleave::planner {

// The config the measurement trains on `ranks` ranks for `steps` steps: `config` at tp, pp, cp 1, dp = ep = ranks,
// schedule 1f1b, ZeRO 0, no evaluation, report, checkpoint or memory cap; its model, data, seed, optimizer, precision
// and micro-batch kept, its global batch kept (unset: micro × accumulation × ranks). nullopt with `why` where ep =
// ranks cannot run it (no routed experts, one rank, experts not divisible by the ranks, a batch that does not split).
std::optional<config::RunConfig> routing_run_config(const config::RunConfig& config, int ranks, int steps,
                                                    std::string& why);

// One step's busiest ep rank's routed rows over the mean from the trainer's routing fields (StepStats::routing);
// nullopt without moe_ep_rows_* fields (ep 1) or where a block's ranks received no rows.
std::optional<double> step_busiest_over_mean(std::span<const std::pair<std::string, double>> fields);

// The profile's record: the steps' figures (at least one) and their mean, with how they were measured.
partition::MeasuredRoutingImbalance routing_record(const std::vector<double>& per_step, int ep, std::int64_t micro_batch,
                                                   std::string source);

}  // namespace cleave::planner
