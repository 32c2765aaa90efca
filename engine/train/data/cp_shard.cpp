// cp_shard (cp_shard.hpp).
#include "engine/train/data/cp_shard.hpp"

#include <cstring>

#include "engine/core/error.hpp"

namespace cleave::train {
namespace {

Tensor shard_tokens(const Tensor& all, const layers::CpLayout& cp, Allocator& allocator, const char* what) {
  CLEAVE_CHECK(all.dtype() == DType::kI32 && all.rank() == 2,
               "context parallelism: batch {} must be token sequences [batch, seq] i32, got {} {}", what,
               dtype_name(all.dtype()), all.shape().str());
  const std::int64_t b = all.dim(0), t = all.dim(1);
  const std::int64_t chunks = static_cast<std::int64_t>(cp.size) * cp.chunks_per_rank();
  CLEAVE_CHECK(t % chunks == 0, "context parallelism: a sequence of {} tokens does not split into {} chunks", t,
               chunks);
  const std::int64_t tl = t / cp.size;
  Tensor out = Tensor::empty(Shape{b, tl}, DType::kI32, all.category(), allocator);
  const std::int32_t* from = all.data<std::int32_t>();
  std::int32_t* to = out.data<std::int32_t>();
  for (std::int64_t s = 0; s < b; ++s) {
    for (const layers::CpSegment& run : cp.segments(tl)) {
      std::memcpy(to + s * tl + run.local_begin, from + s * t + run.global_begin,
                  static_cast<std::size_t>(run.length) * sizeof(std::int32_t));
    }
  }
  return out;
}

}  // namespace

Batch cp_shard(const Batch& host, const layers::CpLayout& cp, Allocator& allocator) {
  if (!cp.active()) return host;
  return {shard_tokens(host.inputs, cp, allocator, "inputs"), shard_tokens(host.targets, cp, allocator, "targets")};
}

}  // namespace cleave::train
