// Every logical parameter by name, assembled from its tp shards, on every rank (equivalence checks, cleave
// verify). Replica 0 supplies each name: per tp rank, the lowest world rank holding it broadcasts its shard and
// ShardSpec. Collective over the world; host vectors, whatever device the parameters live on.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train {

std::map<std::string, std::vector<float>> gather_parameters(RankSetup& setup, const RankModel& model);

}  // namespace cleave::train
