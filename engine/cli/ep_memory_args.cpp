// See ep_memory_args.hpp.
#include "engine/cli/ep_memory_args.hpp"

#include <utility>

#include "engine/core/input_error.hpp"
#include "engine/run_plan/plan.hpp"
#include "partition/ep_rules.hpp"

namespace cleave::cli {

void add_ep_memory_args(ArgParser& p) {
  p.number("--ep-stash-imbalance", "S",
           "expert parallelism (moe), the memory plan: a rank's routed rows summed over the blocks it\n"
           "stashes, over their mean (the largest over ranks and steps; default 0: the dropless bound\n"
           "min(k, E/ep) x ep / k, which no routing exceeds; docs/planner.md#expert-parallelisms-memory)",
           0, 0)
      .number("--ep-peak-imbalance", "P",
              "expert parallelism (moe), the memory plan: the busiest block's busiest rank's routed rows\n"
              "over the mean, for the block whose backward forms the peak (default 0: the dropless bound)",
              0, 0);
}

partition::EpMemoryImbalance ep_memory_imbalance(const Args& args, std::string_view command,
                                                 const config::RunConfig& base) {
  const partition::EpMemoryImbalance m{args.number("--ep-stash-imbalance"), args.number("--ep-peak-imbalance")};
  for (const auto& [name, value] : {std::pair{"--ep-stash-imbalance", m.stash}, {"--ep-peak-imbalance", m.peak}}) {
    CLEAVE_CHECK_INPUT(value == 0 || value >= 1,
                       "{}: {} {} is below 1 (a rank's routed rows over the mean); use 0 for the dropless bound or a "
                       "value >= 1", command, name, value);
    CLEAVE_CHECK_INPUT(value == 0 || partition::routed_experts(run_plan::model_spec(base.model)) > 0,
                       "{}: {} {} sizes expert parallelism's rows, and model.type {} has no experts (only \"moe\" "
                       "has); drop {}", command, name, value, base.model.type, name);
  }
  CLEAVE_CHECK_INPUT(m.stash == 0 || m.peak == 0 || m.peak >= m.stash,
                     "{}: --ep-peak-imbalance {} is below --ep-stash-imbalance {}: the busiest block's rows bound "
                     "every block's, so their mean too (give P >= S, or 0 for the dropless bound)", command, m.peak,
                     m.stash);
  return m;
}

}  // namespace cleave::cli
