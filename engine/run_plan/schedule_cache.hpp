// ScheduleCache: the pipeline schedules make_plan has built, kept by what their construction reads, for a caller
// that makes many plans with the same few schedules (the planner's search, engine/planner/plan_search.cpp: every
// ZeRO stage, recomputation, sequence-parallel and context-parallel choice of a layout reuses one schedule, and the
// automatic zero-bubble scheduler's search is most of a plan's cost).
// Invariant: an entry's key names every input its construction reads (a named schedule: name, pp, micro-batches,
// virtual stages; `auto`: pp, micro-batches and every field of its options the search reads, doubles written
// exactly), and the construction is deterministic, so a plan made with the cache equals one made without it.
// Only schedules that passed the validator are kept. Not thread-safe: one cache per search.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "pipeline/schedule.hpp"

namespace cleave::run_plan {

class ScheduleCache {
 public:
  struct Entry {
    pipeline::Schedule compute;  // as built (and validated)
    pipeline::Schedule lowered;  // pipeline::ensure_lowered(compute)
  };
  // nullptr when the key was never inserted.
  std::shared_ptr<const Entry> find(const std::string& key);
  void insert(const std::string& key, std::shared_ptr<const Entry> entry);
  std::size_t size() const { return entries_.size(); }
  std::size_t hits() const { return hits_; }  // finds that returned an entry

 private:
  std::unordered_map<std::string, std::shared_ptr<const Entry>> entries_;
  std::size_t hits_ = 0;
};

}  // namespace cleave::run_plan
