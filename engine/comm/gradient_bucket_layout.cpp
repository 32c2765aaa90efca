// The bucket layout of the data-parallel gradient buckets (gradient_bucket_layout.hpp): a pure function of the
// gradients' specs, so every rank cuts the same buckets and the collectives match.
#include "engine/comm/gradient_bucket_layout.hpp"

#include <algorithm>
#include <cstddef>

#include "engine/core/error.hpp"

namespace cleave::comm {
namespace {

constexpr std::size_t kAlignBytes = 64;

// Its own test rather than host_reduce's is_floating: this file links nothing but engine/core (the memory plan
// calls it).
bool is_floating(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

BucketLayout lay_out_buckets(const std::vector<GradientSpec>& grads, double bucket_mib, bool pack_units,
                             int shard_multiple) {
  BucketLayout layout;
  std::vector<GradientBucket>& buckets = layout.buckets;
  const auto cap_bytes = static_cast<std::int64_t>(bucket_mib * 1024.0 * 1024.0);
  const int num_grads = static_cast<int>(grads.size());
  const bool by_unit = std::any_of(grads.begin(), grads.end(), [](const GradientSpec& g) { return g.unit >= 0; });
  for (int i = 0; i < num_grads; ++i) {
    const GradientSpec& g = grads[static_cast<std::size_t>(i)];
    CLEAVE_CHECK(is_floating(g.dtype), "gradient bucketer: gradient {} ('{}') is {}; gradients must be f32, bf16 or f16",
                 i, g.name, dtype_name(g.dtype));
    const auto elem = static_cast<std::int64_t>(dtype_size(g.dtype));
    const std::int64_t align = static_cast<std::int64_t>(kAlignBytes) / elem;
    const std::int64_t numel = g.shape.numel();
    bool open_new = buckets.empty() || buckets.back().dtype != g.dtype;
    if (by_unit && pack_units) {  // whole units up to the cap, one group per bucket
      const GradientSpec* prev = i > 0 ? &grads[static_cast<std::size_t>(i - 1)] : nullptr;
      if (!open_new && prev->unit != g.unit) {
        std::int64_t unit_numel = 0;  // the new unit's elements, aligned
        for (int j = i; j < num_grads && grads[static_cast<std::size_t>(j)].unit == g.unit; ++j) {
          unit_numel = round_up(unit_numel, align) + grads[static_cast<std::size_t>(j)].shape.numel();
        }
        const std::int64_t end = round_up(buckets.back().numel, align) + unit_numel;
        open_new = prev->group != g.group || end * elem > cap_bytes;
      }
    } else if (by_unit) {
      open_new = open_new || g.unit != grads[static_cast<std::size_t>(i - 1)].unit;
    } else if (!open_new) {
      const GradientBucket& cur = buckets.back();
      const std::int64_t end = round_up(cur.numel, align) + numel;
      open_new = cur.end_grad > cur.first_grad && end * elem > cap_bytes;
    }
    if (open_new) buckets.push_back(GradientBucket{g.dtype, 0, i, i});
    GradientBucket& cur = buckets.back();
    const std::int64_t offset = round_up(cur.numel, align);
    layout.slots.push_back(GradientSlot{static_cast<int>(buckets.size()) - 1, offset, numel});
    cur.numel = offset + numel;
    cur.end_grad = i + 1;
  }
  if (by_unit) {  // a unit in two buckets would be gathered and reduced in pieces: its gradients were not adjacent
    for (std::size_t b = 1; b < buckets.size(); ++b) {
      for (std::size_t c = 0; c < b; ++c) {
        CLEAVE_ASSERT(grads[static_cast<std::size_t>(buckets[b].first_grad)].unit !=
                          grads[static_cast<std::size_t>(buckets[c].first_grad)].unit,
                      "gradient bucketer: unit {} ('{}') is split over buckets {} and {}",
                      grads[static_cast<std::size_t>(buckets[b].first_grad)].unit,
                      grads[static_cast<std::size_t>(buckets[b].first_grad)].name, c, b);
      }
    }
  }
  for (GradientBucket& b : buckets) {
    const auto elem = static_cast<std::int64_t>(dtype_size(b.dtype));
    b.numel = round_up(round_up(b.numel, static_cast<std::int64_t>(kAlignBytes) / elem), shard_multiple);
  }
  return layout;
}

}  // namespace cleave::comm
