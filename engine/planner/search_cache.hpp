// SearchCache: what the planner's search (search_plans, engine/planner/plan_search.cpp) computes once and reuses
// across its candidates, where most of a candidate's time went (perf, examples/moe/config.json, --world 8):
//   schedules     the pipeline schedules make_plan builds (run_plan::ScheduleCache: every ZeRO stage, recomputation,
//                 sequence-parallel, tp, cp and ep choice of a layout runs one schedule);
//   prepared      each distinct lowered schedule validated and indexed for the simulator (pipeline::PreparedSchedule;
//                 two simulations per candidate had validated it afresh);
//   expected_max  the expected maximum of ep standard normals behind the default expert-parallel imbalance
//                 (partition::ExpectedMaxTable: a numerical integration asked once per candidate and pp rank).
// Invariant: every entry is found only by every input its construction reads (ScheduleCache's keys; a prepared
// schedule by the whole schedule, compared field by field; an integral by its one argument), and every construction
// is deterministic, so an estimate made with the cache equals one made without it. Not thread-safe: one per search.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/run_plan/schedule_cache.hpp"
#include "partition/ep_costs.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/simulator.hpp"

namespace cleave::planner {

// Prepared schedules by content: prepare(s) returns the one made from a schedule equal to s (operator==, every
// field), making it on the first ask. Throws Error for an invalid schedule (PreparedSchedule's), keeping nothing.
class PreparedSchedules {
 public:
  std::shared_ptr<const pipeline::PreparedSchedule> prepare(const pipeline::Schedule& schedule);
  std::size_t size() const { return size_; }
  std::size_t hits() const { return hits_; }

 private:
  struct Entry {
    pipeline::Schedule source;  // as asked (the prepared one is lowered)
    std::shared_ptr<const pipeline::PreparedSchedule> prepared;
  };
  // Bucketed by a summary (name, sizes, action count); inside a bucket compared whole.
  std::unordered_map<std::string, std::vector<Entry>> buckets_;
  std::size_t size_ = 0;
  std::size_t hits_ = 0;
};

struct SearchCache {
  run_plan::ScheduleCache schedules;
  PreparedSchedules prepared;
  partition::ExpectedMaxTable expected_max;
};

}  // namespace cleave::planner
