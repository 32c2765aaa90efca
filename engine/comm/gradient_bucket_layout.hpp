// Where each gradient lives in the data-parallel gradient buckets (gradient_bucketer.hpp): a pure function of the
// gradients' specs in ready order and the bucket size, computed alike on every rank.
//
// Invariants: buckets cover the gradients in ready order, contiguously (bucket b holds [first_grad, end_grad)); a
// bucket holds one dtype; each gradient starts on a 64-byte boundary; a bucket's numel is padded to 64 bytes and
// to a multiple of `shard_multiple` (the dp size when the buckets are reduce-scattered), so every rank's block
// has the same length. Cutting rule: without units a bucket closes when the next gradient would take it past
// bucket_mib (a larger gradient is alone); with units (GradientSpec::unit) at every change of unit, or with
// pack_units whole units up to bucket_mib, never two groups in one bucket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.hpp"
#include "engine/core/shape.hpp"

namespace cleave::comm {

struct GradientSpec {
  std::string name;  // for messages: "blocks.3.mlp.fc1.weight"
  Shape shape;
  DType dtype = DType::kF32;
  // ZeRO-3 (engine/train/parameter_shards.hpp): when any gradient has a unit >= 0, buckets are cut where the
  // unit changes and nowhere else (bucket_mib is not used), so each unit (a block's parameters) is one bucket
  // and one collective. Consecutive gradients of one unit must be adjacent in the ready order.
  // With BucketerOptions::pack_units, whole units are packed into buckets up to bucket_mib instead (a unit larger
  // than that alone), never two units of different `group`s in one bucket.
  int unit = -1;
  int group = -1;
};

// Where one gradient lives.
struct GradientSlot {
  int bucket = 0;
  std::int64_t offset = 0;  // elements from the bucket buffer's start
  std::int64_t numel = 0;
};

struct GradientBucket {
  DType dtype = DType::kF32;
  std::int64_t numel = 0;  // including alignment (and, for reduce-scatter, dp) padding
  int first_grad = 0;      // gradients [first_grad, end_grad) in ready order
  int end_grad = 0;
};

struct BucketLayout {
  std::vector<GradientSlot> slots;  // one per gradient, in ready order
  std::vector<GradientBucket> buckets;
};

// The buckets of `grads` (in ready order). Throws Error for a gradient that is not f32, bf16 or f16.
BucketLayout lay_out_buckets(const std::vector<GradientSpec>& grads, double bucket_mib, bool pack_units,
                             int shard_multiple);

}  // namespace cleave::comm
