// See search_cache.hpp.
#include "engine/planner/search_cache.hpp"

#include <fmt/format.h>

namespace cleave::planner {

std::shared_ptr<const pipeline::PreparedSchedule> PreparedSchedules::prepare(const pipeline::Schedule& schedule) {
  const std::string summary = fmt::format("{} pp{} stages{} m{} v{} overlap{} actions{}", schedule.name,
                                          schedule.pp_size, schedule.num_stages, schedule.num_microbatches,
                                          schedule.virtual_stages, schedule.overlap_fb_pairs, schedule.num_actions());
  std::vector<Entry>& bucket = buckets_[summary];
  for (const Entry& e : bucket) {
    if (e.source == schedule) {
      ++hits_;
      return e.prepared;
    }
  }
  auto prepared = std::make_shared<const pipeline::PreparedSchedule>(schedule);
  bucket.push_back({schedule, prepared});
  ++size_;
  return prepared;
}

}  // namespace cleave::planner
