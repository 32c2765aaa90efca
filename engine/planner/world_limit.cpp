// See world_limit.hpp.
#include "engine/planner/world_limit.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "partition/cp_rules.hpp"
#include "partition/families/family.hpp"
#include "partition/measured_costs.hpp"
#include "partition/tp_rules.hpp"

namespace cleave::planner {

void check_world_within_reach(const config::RunConfig& base, const partition::ModelSpec& spec,
                              const HardwareProfile& profile, int world, std::int64_t global) {
  std::vector<std::int64_t> tps = {1};
  if (const auto tp_sizes = partition::family(base.model.type).tp_sizes) tps = tp_sizes(base.model);
  std::int64_t tp = 1, cp = 1;
  std::string cp_comm;
  for (const std::int64_t t : tps) {
    if (t > std::max(1, profile.ranks_per_node)) continue;
    if (profile.measured.has_blocks() &&
        !std::all_of(spec.blocks.begin(), spec.blocks.end(), [&](const partition::BlockSpec& b) {
          return profile.measured.covers(partition::block_shape_key(b), static_cast<int>(t));
        })) {
      continue;
    }
    for (const bool ring : {true, false}) {
      const std::int64_t c =
          partition::has_attention(spec)
              ? partition::allowed_cp_sizes(spec, static_cast<int>(t), ring, false, spec.token_sizes().seq_len).back()
              : 1;
      if (t * c > tp * cp) tp = t, cp = c, cp_comm = c > 1 ? (ring ? "ring" : "all_to_all") : "";
    }
  }
  const auto pp = static_cast<std::int64_t>(spec.blocks.size());
  const std::int64_t most = tp * cp * pp * global;
  const std::string cp_rule = partition::has_attention(spec)
                                  ? fmt::format("cp by model.seq_len {} and the heads", spec.token_sizes().seq_len)
                                  : std::string("no cp: the model has no attention");
  CLEAVE_CHECK_INPUT(world <= most,
                     "plan: --world {} is more ranks than any layout of this config can use: at most {} = tp {} x cp "
                     "{}{} (the largest tp x cp the model allows: tp within a node of {} ranks{}{}, {}) x pp {} (one "
                     "block per stage) x dp {} (batch.global_batch_size); plan for at most {} ranks, or a larger model "
                     "or global batch",
                     world, most, tp, cp, cp_comm.empty() ? "" : " " + cp_comm, profile.ranks_per_node,
                     profile.measured.has_blocks() ? " and measured by profile " : "",
                     profile.measured.has_blocks() ? "'" + profile.name + "'" : "", cp_rule, pp, global, most);
}

}  // namespace cleave::planner
