// The search's caches (engine/planner/search_cache.hpp) change no estimate: the ep imbalance's integral taken from
// the table is the integral bit for bit; a prepared schedule is found only by a schedule equal to the one it was made
// from (a swapped action, a renamed schedule or the overlap flag each make another); and every candidate of a moe
// search, at every ep, estimates exactly as the same candidate estimated alone without any cache (step, bubble,
// every term of the breakdown, memory, imbalance, all-to-alls, reasons); under a cap a plan over it is returned
// with its memory, as alone, and no time.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/planner/search_cache.hpp"
#include "partition/ep_costs.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "search_equivalence.hpp"
#include "support/scratch_dir_test.hpp"
#include "synthetic_profile.hpp"

namespace cleave::planner::search_cache_test {
namespace {

TEST(ExpectedMaxTable, GivesTheIntegralBitForBitAndIntegratesEachArgumentOnce) {
  partition::ExpectedMaxTable table;
  for (const int n : {1, 2, 3, 4, 8, 16, 4, 2, 64}) {
    EXPECT_EQ(table.at(n), partition::expected_max_standard_normal(n)) << n;
  }
  EXPECT_EQ(table.size(), 7u);  // 1, 2, 3, 4, 8, 16, 64
  for (const int ep : {2, 4, 8}) {
    for (const std::int64_t tokens : {16, 64, 4096}) {
      EXPECT_EQ(partition::expected_ep_imbalance(tokens, 8, 2, ep, &table),
                partition::expected_ep_imbalance(tokens, 8, 2, ep))
          << ep << " " << tokens;
    }
  }
}

TEST(PreparedSchedules, FindsOnlyAnEqualSchedule) {
  PreparedSchedules cache;
  const pipeline::Schedule s = pipeline::lower_schedule(pipeline::make_schedule("1f1b", 2, 4, 1));
  const auto first = cache.prepare(s);
  EXPECT_EQ(cache.prepare(pipeline::Schedule(s)).get(), first.get());
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(first->lowered(), s);
  // The same sizes and action count, but not the same schedule: each is prepared afresh.
  pipeline::Schedule renamed = s;
  renamed.name = "1f1b copy";
  pipeline::Schedule other_order = pipeline::lower_schedule(pipeline::make_schedule("gpipe", 2, 4, 1));
  ASSERT_EQ(other_order.num_actions(), s.num_actions());
  other_order.name = s.name;
  for (const pipeline::Schedule* x : {&renamed, &other_order}) {
    const auto p = cache.prepare(*x);
    EXPECT_NE(p.get(), first.get());
    EXPECT_EQ(p->lowered(), *x);
  }
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.hits(), 1u);
  // A compute-only schedule is prepared lowered, and found again by the compute form it was asked with.
  const pipeline::Schedule compute = pipeline::make_schedule("zb_h1", 2, 4, 1);
  const auto lowered = cache.prepare(compute);
  EXPECT_EQ(lowered->lowered(), pipeline::lower_schedule(compute));
  EXPECT_EQ(cache.prepare(compute).get(), lowered.get());
}

// A moe model of two blocks, E 8, k 2: on 8 ranks the search holds ep 2, 4 and 8.
constexpr const char* kMoe = R"({
  "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 16,
            "ffn_hidden_size": 64, "n_experts": 8, "top_k": 2},
  "batch": {"global_batch_size": 8, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

HardwareProfile links() { return testing::synthetic_profile(1e9, 1e11, Link{1e-6, 1e10}, Link{1e-5, 1e9}, 4); }

// Each test's config file in a folder of its own, removed after it.
class SearchCache : public testing::ScratchDirTest {
 protected:
  SearchCache() : ScratchDirTest("cleave_search_cache_test_") {}
};

TEST_F(SearchCache, EveryMoeCandidateEstimatesAsTheCandidateAloneWithoutACache) {
  const std::string path = write("search_cache_moe.json", kMoe);
  SearchOptions options;
  options.world = 8;
  const HardwareProfile profile = links();
  const SearchResult searched = search_plans(path, {}, profile, options);
  std::set<int> eps;
  int compared = 0, skipped = 0;
  for (const PlanEstimate* e : testing::every_estimate(searched)) {
    if (e->choice.schedule == "-") continue;  // refused before any plan was made (dp does not divide the batch)
    // Every second ep plan (the imbalance the table feeds), every eighth of the others.
    if (skipped++ % (e->choice.ep > 1 ? 2 : 8) != 0) continue;
    testing::expect_estimated_alike(estimate_plan(path, {}, e->choice, profile, options), *e);
    if (e->valid && e->choice.ep > 1) {
      eps.insert(e->choice.ep);
      EXPECT_GT(e->ep_imbalance, 1.0) << testing::candidate_name(e->choice);  // the workload's figure, from the table
    }
    ++compared;
  }
  EXPECT_EQ(eps, (std::set<int>{2, 4, 8}));
  EXPECT_GT(compared, 300);
}

// Under a cap the search prices only the plans that fit: a plan over it carries what cleave plan reads of it (valid,
// the reason, the peak, its rank and categories), equal to the plan estimated alone, and no time; a plan that fits
// is priced as alone.
TEST_F(SearchCache, APlanOverTheCapIsKnownByItsMemoryAndNotPriced) {
  const std::string path = write("search_cache_cap.json", kMoe);
  SearchOptions options;
  options.world = 4;
  const HardwareProfile profile = links();
  const SearchResult all = search_plans(path, {}, profile, options);
  ASSERT_FALSE(all.ranked.empty());
  std::int64_t smallest = all.ranked.front().peak_bytes, largest = 0;
  for (const auto& e : all.ranked) smallest = std::min(smallest, e.peak_bytes), largest = std::max(largest, e.peak_bytes);
  options.memory_limit = (smallest + largest) / 2;
  const SearchResult capped = search_plans(path, {}, profile, options);
  int over = 0, fit = 0;
  for (const auto* list : {&capped.ranked, &capped.rejected}) {
    for (std::size_t i = 0; i < list->size(); i += 3) {
      const PlanEstimate& e = (*list)[i];
      if (!e.valid) continue;
      const PlanEstimate alone = estimate_plan(path, {}, e.choice, profile, options);
      const std::string what = e.choice.layout() + " " + e.choice.schedule + " zero " + e.choice.zero_label();
      EXPECT_EQ(alone.fits, e.fits) << what;
      EXPECT_EQ(alone.reason, e.reason) << what;
      EXPECT_EQ(alone.peak_bytes, e.peak_bytes) << what;
      EXPECT_EQ(alone.peak_rank, e.peak_rank) << what;
      EXPECT_EQ(alone.peak_by_category, e.peak_by_category) << what;
      EXPECT_GT(alone.step_s, 0) << what;
      if (e.fits) {
        EXPECT_EQ(alone.step_s, e.step_s) << what;
        EXPECT_EQ(alone.breakdown.seconds, e.breakdown.seconds) << what;
        ++fit;
      } else {
        EXPECT_GT(e.peak_bytes, options.memory_limit) << what;
        EXPECT_EQ(e.step_s, 0) << what;  // not priced
        ++over;
      }
    }
  }
  EXPECT_GT(over, 10);
  EXPECT_GT(fit, 10);
}

}  // namespace
}  // namespace cleave::planner::search_cache_test
