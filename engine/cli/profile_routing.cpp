// See profile_routing.hpp.
#include "engine/cli/profile_routing.hpp"

#include <vector>

#include <fmt/format.h>

#include "engine/planner/routing_imbalance_measure.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::cli {

std::optional<partition::MeasuredRoutingImbalance> measure_routing_imbalance(const config::RunConfig& config,
                                                                             const std::string& config_path, int steps,
                                                                             comm::Communicator& comm, std::string& why) {
  const int ranks = comm.size();
  const std::optional<config::RunConfig> run = planner::routing_run_config(config, ranks, steps, why);
  if (!run) return std::nullopt;
  std::vector<double> per_step;
  {
    train::Trainer trainer(*run, comm);
    for (std::int64_t s = 0; s < steps; ++s) {
      const train::StepStats stats = trainer.step(s);
      const std::optional<double> f = planner::step_busiest_over_mean(stats.routing);
      if (!f) {
        why = fmt::format("step {} of the run at ep {} dispatched no routed rows", s + 1, ranks);
        return std::nullopt;
      }
      per_step.push_back(*f);
    }
  }
  const config::ResolvedBatch batch = run->resolved_batch();
  return planner::routing_record(
      per_step, ranks, batch.micro_batch_size,
      fmt::format("`cleave profile {}`: the config's model trained from its initial weights on its own data for {} "
                  "steps at ep = dp = {} (tp, pp, cp 1; micro-batch {}, global batch {}, seed {}); per step the "
                  "busiest ep rank's routed rows over the mean (the trainer's moe_ep_rows_*: per moe block max / mean "
                  "- 1 of the rows each ep rank received in the step, meaned over the blocks, plus 1); the mean over "
                  "the steps",
                  config_path, steps, ranks, batch.micro_batch_size, batch.global_batch_size, run->train.seed));
}

}  // namespace cleave::cli
