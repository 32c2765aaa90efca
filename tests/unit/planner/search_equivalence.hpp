// What the plan search's equivalence tests share (schedule_cache_test, search_cache_test): a search's caches must
// change no estimate, so each test searches, then estimates some candidates alone and expects every field the
// candidate's line and breakdown read to be equal, bit for bit (the same arithmetic on the same schedule).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/enum_names.hpp"
#include "engine/planner/plan_search.hpp"

namespace cleave::testing {

// Every estimate a search made: the ranked ones, then the rejected ones.
inline std::vector<const planner::PlanEstimate*> every_estimate(const planner::SearchResult& searched) {
  std::vector<const planner::PlanEstimate*> all;
  for (const auto& e : searched.ranked) all.push_back(&e);
  for (const auto& e : searched.rejected) all.push_back(&e);
  return all;
}

// The candidate as a failure message names it.
inline std::string candidate_name(const planner::PlanChoice& c) {
  return c.layout() + " " + c.schedule + " micro " + std::to_string(c.micro_batch) + " zero " + c.zero_label() +
         " recompute " + std::string(enum_name(c.recompute));
}

// `alone` (the candidate estimated by itself, no cache) equals `searched` (the same candidate inside a search).
inline void expect_estimated_alike(const planner::PlanEstimate& alone, const planner::PlanEstimate& searched) {
  const std::string what = candidate_name(searched.choice);
  EXPECT_EQ(alone.valid, searched.valid) << what;
  EXPECT_EQ(alone.fits, searched.fits) << what;
  EXPECT_EQ(alone.reason, searched.reason) << what;
  EXPECT_EQ(alone.step_s, searched.step_s) << what;
  EXPECT_EQ(alone.bubble, searched.bubble) << what;
  EXPECT_EQ(alone.items_per_s, searched.items_per_s) << what;
  EXPECT_EQ(alone.peak_bytes, searched.peak_bytes) << what;
  EXPECT_EQ(alone.peak_rank, searched.peak_rank) << what;
  EXPECT_EQ(alone.peak_by_category, searched.peak_by_category) << what;
  EXPECT_EQ(alone.comm_bytes, searched.comm_bytes) << what;
  EXPECT_EQ(alone.ep_imbalance, searched.ep_imbalance) << what;
  EXPECT_EQ(alone.ep_all_to_all_s, searched.ep_all_to_all_s) << what;
  EXPECT_EQ(alone.breakdown.seconds, searched.breakdown.seconds) << what;
  EXPECT_EQ(alone.breakdown.hidden, searched.breakdown.hidden) << what;
  EXPECT_EQ(alone.breakdown.rank, searched.breakdown.rank) << what;
}

}  // namespace cleave::testing
