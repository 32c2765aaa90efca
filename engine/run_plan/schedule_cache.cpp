// See schedule_cache.hpp.
#include "engine/run_plan/schedule_cache.hpp"

#include <utility>

namespace cleave::run_plan {

std::shared_ptr<const ScheduleCache::Entry> ScheduleCache::find(const std::string& key) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  ++hits_;
  return it->second;
}

void ScheduleCache::insert(const std::string& key, std::shared_ptr<const Entry> entry) {
  entries_.insert_or_assign(key, std::move(entry));
}

}  // namespace cleave::run_plan
