// Forced routing (model.forced_routing; test and benchmark only): the experts a named routing workload gives
// every token of a micro-batch, which the router then takes instead of its own top-k (layers/moe/router.hpp,
// route's `forced`). The workloads are defined in partition/families/moe.hpp (ForcedRouting) and
// docs/models.md#forced-routing; benchmarks/moe/oracle.py computes the same experts independently, so integer
// arithmetic only (splitmix64, integer Zipf weights): the two must agree bit for bit (moe_forced_routing_oracle).
#pragma once

#include <cstdint>
#include <vector>

#include "partition/families/moe.hpp"

namespace cleave::layers {

// [tokens · top_k]: token n's experts in slot order (distinct), at optimizer step `step` (0-based). Empty for
// ForcedRouting::Kind::kNone.
std::vector<std::int32_t> forced_experts(const partition::ForcedRouting& workload, std::int64_t step,
                                         std::int64_t tokens, std::int64_t experts, std::int64_t top_k);

}  // namespace cleave::layers
