// Shard layout: which elements of a logical tensor a tensor-parallel shard holds (ShardSpec, layer.hpp).
//
// Invariant: for every ShardSpec, place_shard(logical, shard_of(logical, spec), spec) writes back exactly
// the elements it read, and placing the shards of all `parts` indices fills every logical element once.
// Padding rows (a split extent not divisible by parts) read as 0 in shard_of and are skipped by
// place_shard. All functions are pure (no devices, no communication); a replicated spec (dim -1) maps
// the whole tensor onto itself. An expert split (ShardSpec::ep_parts > 1, ep × tp) keeps a contiguous element
// range of the tp shard: its runs are the tp shard's runs clipped to that range, so the invariant holds for it too
// and the ep_parts × parts pieces together fill every logical element once.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/core/shape.hpp"
#include "layers/layer.hpp"

namespace cleave::layers {

// A checked ShardSpec: piece `index` of `parts` along `dim` of `logical`, the dimension made of `groups`
// equal blocks. Throws Error when dim is out of range, parts < 1, index outside [0, parts), groups < 1
// or groups does not divide the extent.
ShardSpec make_shard_spec(const Shape& logical, int dim, int parts, int index, int groups = 1);

// `spec` (a tp split along dim >= 1) narrowed to piece `index` of `parts` of its dim 0 (ShardSpec::ep_parts: an
// ep rank's experts of a tp-split expert tensor). Throws Error when dim < 1 or parts does not divide logical[0].
ShardSpec with_expert_split(ShardSpec spec, int parts, int index);

// The element offset of the stored tensor inside the flattened tp shard {dim, parts, index, groups} (0 unless
// ep_parts > 1): where a checkpoint piece of it begins.
std::int64_t expert_split_offset(const ShardSpec& spec);

// A replicated spec (dim -1) for a tensor of shape `logical`.
ShardSpec replicated_spec(const Shape& logical);

// Rows per piece along the split dimension: ceil((extent / groups) / parts); the logical extent when
// replicated.
std::int64_t shard_rows(const ShardSpec& spec);

// The shape of the stored shard (padding included; dim 0 divided by ep_parts).
Shape shard_shape(const ShardSpec& spec);

// Calls fn(logical_offset, shard_offset, length) for every contiguous run of real (non-padding) logical
// elements the shard holds, in increasing shard order. Offsets and lengths count elements.
void for_each_shard_run(const ShardSpec& spec,
                        const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn);

// The shard of `logical` (which holds spec.logical.numel() elements): padding rows are 0.
std::vector<float> shard_of(const std::vector<float>& logical, const ShardSpec& spec);

// Writes `shard` (shard_shape(spec).numel() elements) into its place in `logical` (resized to
// spec.logical.numel() elements when empty); padding is dropped. The inverse of shard_of: placing every
// tp rank's shard rebuilds the logical tensor.
void place_shard(std::vector<float>& logical, const std::vector<float>& shard, const ShardSpec& spec);

// Whether this tp rank's copy of a parameter counts in a sum over the tp group (gradient norm, parameter
// count): a shard always (padding is zero), a replicated parameter only on tp rank 0.
inline bool counted_on_tp_rank(const ShardSpec& spec, int tp_rank) { return spec.dim >= 0 || tp_rank == 0; }

}  // namespace cleave::layers
