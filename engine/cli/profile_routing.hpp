// `cleave profile`'s routing-imbalance measurement: the config's own model trained on its own data for a few steps at
// ep = dp = the profile's ranks (a Trainer over them; engine/planner/routing_imbalance_measure.hpp makes its config and
// reads its figure), each step's busiest ep rank's routed rows over the mean, recorded in the profile
// (HardwareProfile::routing_imbalance) as the planner's default ep imbalance at that ep.
// Invariant: collective over `comm` (every rank trains its share); every rank returns the same record, or nullopt
// with the same reason (a pure function of the config and the ranks).
#pragma once

#include <optional>
#include <string>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "partition/routing_imbalance.hpp"

namespace cleave::cli {

// Trains `steps` steps of `config` (read from `config_path`) at ep = comm.size(); nullopt with `why` where that
// layout cannot run it (routing_run_config's reasons) or no step dispatched rows.
std::optional<partition::MeasuredRoutingImbalance> measure_routing_imbalance(const config::RunConfig& config,
                                                                             const std::string& config_path, int steps,
                                                                             comm::Communicator& comm, std::string& why);

}  // namespace cleave::cli
