// Shard layout arithmetic (see shard.hpp). A logical tensor is viewed as [outer, extent, inner] around the
// split dimension; the extent as [groups, G]; a shard as [outer, groups, P, inner] with P = ceil(G / parts).
#include "layers/parallel/shard.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace cleave::layers {

namespace {

struct Layout {
  std::int64_t outer = 1, extent = 1, inner = 1;
  std::int64_t group = 1;  // G: logical rows per group
  std::int64_t piece = 1;  // P: stored rows per group
  std::int64_t valid = 1;  // real rows of this piece in each group (the rest is padding)
  std::int64_t first = 0;  // first logical row of this piece inside each group
};

void check_spec(const ShardSpec& spec) {
  if (spec.dim < 0) return;
  CLEAVE_CHECK(spec.dim < spec.logical.rank(), "shard spec: dim {} is outside the logical shape {}", spec.dim,
               spec.logical.str());
  CLEAVE_CHECK(spec.parts >= 1 && spec.index >= 0 && spec.index < spec.parts,
               "shard spec: index {} must be in [0, parts {}) and parts >= 1", spec.index, spec.parts);
  const std::int64_t extent = spec.logical[spec.dim];
  CLEAVE_CHECK(spec.groups >= 1 && extent % spec.groups == 0,
               "shard spec: groups ({}) must be >= 1 and divide the extent {} of dim {} of {}", spec.groups, extent,
               spec.dim, spec.logical.str());
  CLEAVE_CHECK(spec.ep_parts >= 1 && spec.ep_index >= 0 && spec.ep_index < spec.ep_parts,
               "shard spec: ep_index {} must be in [0, ep_parts {}) and ep_parts >= 1", spec.ep_index, spec.ep_parts);
  CLEAVE_CHECK(spec.ep_parts == 1 || (spec.dim >= 1 && spec.logical[0] % spec.ep_parts == 0),
               "shard spec: an expert split in {} parts needs a tp split along dim >= 1 (got {}) and parts dividing "
               "dim 0 of {}",
               spec.ep_parts, spec.dim, spec.logical.str());
}

// The tp shard's shape (ep_parts ignored).
Shape tp_shard_shape(const ShardSpec& spec, std::int64_t piece) {
  return spec.logical.with_dim(spec.dim, spec.groups * piece);
}

Layout layout_of(const ShardSpec& spec) {
  check_spec(spec);
  Layout l;
  if (spec.dim < 0) {
    l.extent = spec.logical.numel();
    l.group = l.piece = l.valid = l.extent;
    return l;
  }
  for (int d = 0; d < spec.dim; ++d) l.outer *= spec.logical[d];
  for (int d = spec.dim + 1; d < spec.logical.rank(); ++d) l.inner *= spec.logical[d];
  l.extent = spec.logical[spec.dim];
  l.group = l.extent / spec.groups;
  l.piece = (l.group + spec.parts - 1) / spec.parts;
  l.first = spec.index * l.piece;
  l.valid = std::clamp<std::int64_t>(l.group - l.first, 0, l.piece);
  return l;
}

}  // namespace

ShardSpec make_shard_spec(const Shape& logical, int dim, int parts, int index, int groups) {
  CLEAVE_CHECK(dim >= 0, "make_shard_spec: dim must be >= 0 (use replicated_spec), got {}", dim);
  ShardSpec spec;
  spec.dim = dim;
  spec.parts = parts;
  spec.index = index;
  spec.groups = groups;
  spec.logical = logical;
  check_spec(spec);
  return spec;
}

ShardSpec with_expert_split(ShardSpec spec, int parts, int index) {
  spec.ep_parts = parts;
  spec.ep_index = index;
  check_spec(spec);
  return spec;
}

std::int64_t expert_split_offset(const ShardSpec& spec) {
  if (spec.ep_parts == 1) return 0;
  return tp_shard_shape(spec, layout_of(spec).piece).numel() / spec.ep_parts * spec.ep_index;
}

ShardSpec replicated_spec(const Shape& logical) {
  ShardSpec spec;
  spec.logical = logical;
  return spec;
}

std::int64_t shard_rows(const ShardSpec& spec) { return layout_of(spec).piece; }

Shape shard_shape(const ShardSpec& spec) {
  if (spec.dim < 0) return spec.logical;
  const Shape tp = tp_shard_shape(spec, layout_of(spec).piece);
  return spec.ep_parts == 1 ? tp : tp.with_dim(0, tp[0] / spec.ep_parts);
}

void for_each_shard_run(const ShardSpec& spec,
                        const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn) {
  const Layout l = layout_of(spec);
  if (spec.dim < 0) {
    if (l.extent > 0) fn(0, 0, l.extent);
    return;
  }
  if (l.valid == 0 || l.inner == 0) return;
  // An expert split keeps the tp shard's elements [lo, hi) (contiguous: dim 0 is outermost and not the tp dim).
  const std::int64_t lo = expert_split_offset(spec), hi = lo + shard_shape(spec).numel();
  for (std::int64_t o = 0; o < l.outer; ++o) {
    for (std::int64_t g = 0; g < spec.groups; ++g) {
      const std::int64_t logical_at = (o * l.extent + g * l.group + l.first) * l.inner;
      const std::int64_t shard_at = (o * spec.groups + g) * l.piece * l.inner;
      const std::int64_t from = std::max(shard_at, lo), to = std::min(shard_at + l.valid * l.inner, hi);
      if (from < to) fn(logical_at + from - shard_at, from - lo, to - from);
    }
  }
}

std::vector<float> shard_of(const std::vector<float>& logical, const ShardSpec& spec) {
  CLEAVE_CHECK(static_cast<std::int64_t>(logical.size()) == spec.logical.numel(),
               "shard_of: {} values for the logical shape {}", logical.size(), spec.logical.str());
  std::vector<float> shard(static_cast<std::size_t>(shard_shape(spec).numel()), 0.0f);
  for_each_shard_run(spec, [&](std::int64_t from, std::int64_t to, std::int64_t n) {
    std::copy_n(logical.begin() + from, n, shard.begin() + to);
  });
  return shard;
}

void place_shard(std::vector<float>& logical, const std::vector<float>& shard, const ShardSpec& spec) {
  if (logical.empty()) logical.assign(static_cast<std::size_t>(spec.logical.numel()), 0.0f);
  CLEAVE_CHECK(static_cast<std::int64_t>(logical.size()) == spec.logical.numel(),
               "place_shard: logical holds {} values, the shape {} needs {}", logical.size(), spec.logical.str(),
               spec.logical.numel());
  CLEAVE_CHECK(static_cast<std::int64_t>(shard.size()) == shard_shape(spec).numel(),
               "place_shard: shard holds {} values, the shard shape {} needs {}", shard.size(),
               shard_shape(spec).str(), shard_shape(spec).numel());
  for_each_shard_run(spec, [&](std::int64_t to, std::int64_t from, std::int64_t n) {
    std::copy_n(shard.begin() + from, n, logical.begin() + to);
  });
}

}  // namespace cleave::layers
