// CpLayout: the chunk arithmetic of context parallelism (see cp_layout.hpp).
#include "layers/context_parallel/cp_layout.hpp"

#include <algorithm>

#include "engine/core/error.hpp"

namespace cleave::layers {

void CpSegments::push_back(const CpSegment& s) {
  CLEAVE_ASSERT(size_ < kMax, "cp: more than {} runs", kMax);
  runs_[size_++] = s;
}

int CpLayout::chunk_index(int k, int of_rank) const {
  CLEAVE_ASSERT(k >= 0 && k < chunks_per_rank() && of_rank >= 0 && of_rank < size, "cp chunk {} of rank {} (cp {})",
                k, of_rank, size);
  if (chunks_per_rank() == 1) return of_rank;
  return k == 0 ? of_rank : 2 * size - 1 - of_rank;
}

CpSegments CpLayout::segments_of(int of_rank, std::int64_t local_tokens) const {
  const int chunks = chunks_per_rank();
  CLEAVE_ASSERT(local_tokens % chunks == 0, "cp: {} local tokens do not split into {} chunks", local_tokens, chunks);
  const std::int64_t c = local_tokens / chunks;
  CpSegments out;
  for (int k = 0; k < chunks; ++k) out.push_back({k * c, chunk_index(k, of_rank) * c, c});
  return out;
}

CpSegments CpLayout::segments(std::int64_t local_tokens, std::int64_t first, std::int64_t count) const {
  CLEAVE_ASSERT(first >= 0 && count >= 0 && first + count <= local_tokens, "cp: tokens [{}, {}) of {}", first,
                first + count, local_tokens);
  CpSegments out;
  for (const CpSegment& s : segments_of(rank, local_tokens)) {
    const std::int64_t begin = std::max(first, s.local_begin);
    const std::int64_t end = std::min(first + count, s.local_begin + s.length);
    if (begin < end) out.push_back({begin, s.global_begin + (begin - s.local_begin), end - begin});
  }
  return out;
}

}  // namespace cleave::layers
