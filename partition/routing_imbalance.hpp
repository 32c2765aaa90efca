// MeasuredRoutingImbalance: the routing imbalance `cleave profile` measured for a model with routed experts (file key
// "routing_imbalance" of a hardware profile): the config's own model trained on its own data for a few steps at
// ep = the profile's ranks, and per step the busiest ep rank's routed rows over the mean (1 + the mean over the moe
// blocks of max / mean - 1 of the rows each ep rank received, summed over the step's micro-batches: the trainer's
// moe_ep_rows_* fields, benchmarks/moe/ep_waits.py's busiest_over_mean). The planner prices ep at that ep from it
// in place of the uniform-routing formula (engine/planner/ep_imbalance_default.hpp).
// Invariant: a value read or written has busiest_over_mean >= 1, ep >= 2, steps >= 1 with that many per-step
// figures, each >= 1, micro_batch >= 1 and a non-empty source; a bad entry is an Error naming the file and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cleave::partition {

struct MeasuredRoutingImbalance {
  double busiest_over_mean = 1.0;  // the mean of per_step: the figure the planner prices
  int ep = 2;                      // the expert-parallel width it was measured at (the profile's ranks)
  int steps = 1;                   // training steps run from the config's initial weights
  std::int64_t micro_batch = 1;    // the micro-batch size the steps ran at (the config's)
  std::vector<double> per_step;    // each step's figure, in order (steps of them)
  std::string source;              // how it was measured, for a reader
};

nlohmann::json routing_imbalance_to_json(const MeasuredRoutingImbalance& m);
// Reads the "routing_imbalance" object; `where` names the file and key in an error.
MeasuredRoutingImbalance routing_imbalance_from_json(const nlohmann::json& node, const std::string& where);

}  // namespace cleave::partition
