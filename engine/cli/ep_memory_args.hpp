// The memory plan's expert-parallel imbalances on the command line (`cleave plan`, `cleave simulate --config`):
// --ep-stash-imbalance S and --ep-peak-imbalance P (partition::EpMemoryImbalance; docs/planner.md "Expert
// parallelism's memory"). Invariant: what the command passes on is 0 (the dropless bound) or >= 1, for a model with
// routed experts only, and P >= S where both are given, checked before any work.
#pragma once

#include <string_view>

#include "engine/cli/args.hpp"
#include "engine/config/config.hpp"
#include "partition/ep_costs.hpp"

namespace cleave::cli {

// Adds the two options to a command's parser.
void add_ep_memory_args(ArgParser& p);

// The two figures as given (0 where not), checked against `base` (exit 64 on a bad value, naming the command).
partition::EpMemoryImbalance ep_memory_imbalance(const Args& args, std::string_view command,
                                                 const config::RunConfig& base);

}  // namespace cleave::cli
