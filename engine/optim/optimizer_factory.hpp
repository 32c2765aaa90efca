// Builds the optimizer the `optimizer` config section describes.
//
// This builds the per-rank optimizer over the Params it is given; optimizer.zero_stage (sharding state
// across dp) is honoured by the trainer, which passes only the rank's shard or wraps this optimizer.
#pragma once

#include <memory>

#include "engine/config/config.hpp"
#include "engine/optim/optimizer.hpp"

namespace cleave::optim {

std::unique_ptr<Optimizer> make_optimizer(const config::OptimizerConfig& config, const ParamList& params,
                                          Allocator& allocator);

}  // namespace cleave::optim
