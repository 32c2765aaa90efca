// See ep_memory_args.hpp.
#include "engine/cli/ep_memory_args.hpp"

#include <utility>

#include <fmt/format.h>

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
  // A flag not given falls back to the config's key (run_plan::ep_memory_figures), so P >= S is checked on the pair
  // the plan will use, each named by where it came from.
  const auto effective = [&](double flag, double key, const char* flag_name, const char* key_name) {
    return flag > 0 ? std::pair{flag, fmt::format("{} {}", flag_name, flag)}
                    : std::pair{key, fmt::format("the config's {} {}", key_name, key)};
  };
  const auto [stash, stash_from] =
      effective(m.stash, base.parallel.ep_stash_imbalance, "--ep-stash-imbalance", "parallel.ep_stash_imbalance");
  const auto [peak, peak_from] =
      effective(m.peak, base.parallel.ep_peak_imbalance, "--ep-peak-imbalance", "parallel.ep_peak_imbalance");
  CLEAVE_CHECK_INPUT(stash == 0 || peak == 0 || peak >= stash,
                     "{}: {} is below {}: the busiest block's rows bound every block's, so their mean too (give "
                     "P >= S, or 0 for the dropless bound)", command, peak_from, stash_from);
  return m;
}

}  // namespace cleave::cli
