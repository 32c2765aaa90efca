// The three collectives the cost model and the planner name: what a block's layers post over their tp group
// (cost_model.hpp, TpCollective) and what a profile fits and the planner prices (measured_costs.hpp; file keys
// "all_reduce", "reduce_scatter", "all_gather" under "measured").
#pragma once

#include <array>

#include "engine/core/enum_names.hpp"

namespace cleave::partition {

enum class Collective { kAllReduce, kReduceScatter, kAllGather };
constexpr std::array<EnumName<Collective>, 3> enum_names(Collective) {
  return {{{Collective::kAllReduce, "all_reduce"},
           {Collective::kReduceScatter, "reduce_scatter"},
           {Collective::kAllGather, "all_gather"}}};
}

}  // namespace cleave::partition
