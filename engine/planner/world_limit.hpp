// The largest world a config's layouts can use, for `cleave plan` to refuse a larger --world before its search.
// The most ranks a layout of this config can use, exactly: the largest tp × cp over the tp sizes the family allows
// within a node (and, with measured block tables, the profile measured) and the cp sizes each allows (either
// exchange, partition::allowed_cp_sizes: ring cuts a sequence into 2 cp chunks, all_to_all splits the heads of a
// tp rank), × pp (one block per stage) × dp (the global batch). That layout is one the engine accepts (1f1b with
// one micro-batch per replica), and every candidate of a larger world is invalid, so the search is refused before
// it starts (at --world 1000000 it would price tens of thousands of candidates only to refuse them).
// Invariant: the bound is attained (the layout it names is valid), so it refuses exactly the worlds whose every
// candidate is invalid for size reasons, and changes no ranking. Throws InputError (bad input, exit 64, as when no plan
// of a world is valid) naming --world, the bound and its factors.
#pragma once

#include <cstdint>

#include "engine/config/config.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "partition/model_spec.hpp"

namespace cleave::planner {

void check_world_within_reach(const config::RunConfig& base, const partition::ModelSpec& spec,
                              const HardwareProfile& profile, int world, std::int64_t global);

}  // namespace cleave::planner
