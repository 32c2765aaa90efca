// ZeRO-2's per-micro-batch buckets and their exposure (microbatch_buckets.hpp).
#include "engine/planner/microbatch_buckets.hpp"

#include <algorithm>
#include <cstddef>

#include "engine/core/error.hpp"

namespace cleave::planner {

std::vector<double> microbatch_buckets(const std::vector<double>& block_bytes, double table_bytes, double cap_bytes) {
  CLEAVE_CHECK(cap_bytes > 0, "microbatch_buckets: the bucket cap must be > 0 bytes, got {}", cap_bytes);
  std::vector<double> buckets;
  for (auto it = block_bytes.rbegin(); it != block_bytes.rend(); ++it) {
    if (*it <= 0) continue;  // a block without parameters writes no bucket
    if (buckets.empty() || buckets.back() + *it > cap_bytes) {
      buckets.push_back(*it);
    } else {
      buckets.back() += *it;
    }
  }
  if (table_bytes > 0) buckets.push_back(table_bytes);
  return buckets;
}

MicrobatchExposure microbatch_exposure(const std::vector<double>& reduce_s, const std::vector<double>& hide_s) {
  CLEAVE_CHECK(reduce_s.size() == hide_s.size(), "microbatch_exposure: {} reductions but {} hiding spans",
               reduce_s.size(), hide_s.size());
  MicrobatchExposure x;
  for (std::size_t j = 0; j < reduce_s.size(); ++j) {
    const double hidden = std::min(reduce_s[j], std::max(0.0, hide_s[j]));
    x.hidden_s += hidden;
    x.exposed_s += reduce_s[j] - hidden;
  }
  return x;
}

}  // namespace cleave::planner
