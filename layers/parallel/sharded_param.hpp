// Creating and initialising tensor-parallel shards of Params.
//
// Invariant: a shard's initial values are, bit for bit, the slice of the logical tensor the single-rank
// builder makes (layers/param_init.hpp): every real element draws the counter-based RNG at its LOGICAL
// index under the parameter's logical name, with the same scheme, std and fan-in. Padding rows (see
// ShardSpec) are 0 and stay 0: no layer writes a gradient into them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/allocator.hpp"
#include "layers/layer.hpp"
#include "layers/param_init.hpp"

namespace cleave::layers {

// A Param holding the shard `spec` of the logical tensor `name`: value and grad of shard_shape(spec), both
// zero (initialise with the functions below), shard = spec. A replicated spec gives a replicated Param.
std::shared_ptr<Param> make_sharded_param(std::string name, const ShardSpec& spec, bool weight_decay,
                                          Allocator& allocator);

// The sharded counterparts of init_normal / init_uniform / init_weight / init_bias: the shard's real
// elements get the values the logical tensor has there; padding is left at 0.
void init_shard_normal(Param& param, std::uint64_t seed, float std);
void init_shard_uniform(Param& param, std::uint64_t seed, float bound);
// `fan_in` is the LOGICAL fan-in (a row-parallel weight's bound uses the full input width).
void init_shard_weight(Param& weight, std::int64_t fan_in, const ParamInit& init);
void init_shard_bias(Param& bias, std::int64_t fan_in, const ParamInit& init);

}  // namespace cleave::layers
