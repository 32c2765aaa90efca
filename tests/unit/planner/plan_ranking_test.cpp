// The ranking rules of `cleave plan` (engine/planner/plan_ranking.hpp), on numbers chosen by hand:
//  - predicted side: plans within the stated error of their group's fastest are tied, and the tie goes to the
//    plan with more memory headroom (97% of the cap losing to 71% by 0.3%) where the headroom differs by more than
//    the margin (5% of the cap), else to the faster prediction (1 KiB of 80 GiB does not put recompute=selective
//    above a faster none); outside the error the faster prediction wins whatever its memory;
//  - measured side: the spread is the relative half-range of the round medians; the predicted order changes only
//    where two plans' ranges do not overlap; one round (no spread) changes nothing; failed plans go last;
//  - the interleaved rounds stop when every plan's spread is under the bound after the minimum rounds.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/planner/plan_ranking.hpp"

namespace cleave::planner::plan_ranking_test {
namespace {

std::vector<std::size_t> order(const std::vector<Placed>& placed) {
  std::vector<std::size_t> out;
  for (const auto& p : placed) out.push_back(p.index);
  return out;
}
std::vector<int> places(const std::vector<Placed>& placed) {
  std::vector<int> out;
  for (const auto& p : placed) out.push_back(p.place);
  return out;
}

TEST(RankPredicted, NearTieGoesToTheMoreHeadroom) {
  // Plan 0 is 0.3% faster at 97% of the cap; plan 1 at 71%: tied, and plan 1 first.
  const std::vector<PredictedPlan> plans = {{0.1000, 0.97}, {0.1003, 0.71}};
  const auto r = rank_predicted(plans, 0.05);
  EXPECT_EQ(order(r), (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 1}));
  EXPECT_TRUE(r[0].tied && r[1].tied);
}

TEST(RankPredicted, FasterBeyondTheErrorWinsWhateverItsMemory) {
  const std::vector<PredictedPlan> plans = {{0.200, 0.10}, {0.100, 0.99}, {0.104, 0.50}, {0.110, 0.01}};
  const auto r = rank_predicted(plans, 0.05);
  // Group 1: 0.100 and 0.104 (within 5% of 0.100), headroom first: 0.104 @ 50%, then 0.100 @ 99%.
  // Group 2: 0.110 alone (beyond 0.105). Group 3: 0.200.
  EXPECT_EQ(order(r), (std::vector<std::size_t>{2, 1, 3, 0}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 1, 3, 4}));
  EXPECT_FALSE(r[2].tied);
  EXPECT_FALSE(r[3].tied);
}

TEST(RankPredicted, GroupsStartAtTheFastestRemainingPlan) {
  // A chain 1.00, 1.04, 1.08, 1.12: each within 5% of the one before, but groups are measured from their fastest:
  // {1.00, 1.04} then {1.08, 1.12}; headroom reorders inside each group only.
  const std::vector<PredictedPlan> plans = {{1.00, 0.9}, {1.04, 0.8}, {1.08, 0.7}, {1.12, 0.6}};
  const auto r = rank_predicted(plans, 0.05);
  EXPECT_EQ(order(r), (std::vector<std::size_t>{1, 0, 3, 2}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 1, 3, 3}));
}

TEST(RankPredicted, HeadroomInsideTheMarginLeavesTheFasterPlanFirst) {
  // cleave plan's case on the tiny GPT with an 80 GiB cap: recompute=selective predicted 0.89 ms at 664.5 KiB,
  // none 0.88 ms at 665.5 KiB. Tied on time; 1 KiB of 80 GiB is no headroom a user trades speed for: none first.
  const double cap = 80.0 * (1 << 30);
  const std::vector<PredictedPlan> plans = {{0.89e-3, 664.5 * 1024 / cap}, {0.88e-3, 665.5 * 1024 / cap}};
  const auto r = rank_predicted(plans, 0.05);
  EXPECT_EQ(order(r), (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 1}));
  EXPECT_TRUE(r[0].tied && r[1].tied);
  // A margin of 0 lets any byte decide (the rule before the margin): selective first.
  EXPECT_EQ(order(rank_predicted(plans, 0.05, 0.0)), (std::vector<std::size_t>{0, 1}));
  // Beyond the margin headroom decides again: 4.9 points of the cap do not, 5.1 do.
  EXPECT_EQ(order(rank_predicted({{0.100, 0.549}, {0.101, 0.50}}, 0.05)), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(order(rank_predicted({{0.100, 0.551}, {0.101, 0.50}}, 0.05)), (std::vector<std::size_t>{1, 0}));
}

TEST(RankPredicted, HeadroomBandsStartAtTheRoomiestRemainingPlan) {
  // One tie group. Bands of 5 points from the lowest remaining fraction: {0.30}, then {0.47, 0.44} (within 0.44 +
  // 0.05) in time order, then {0.50}.
  const std::vector<PredictedPlan> plans = {{0.100, 0.50}, {0.101, 0.47}, {0.102, 0.44}, {0.103, 0.30}};
  const auto r = rank_predicted(plans, 0.05);
  EXPECT_EQ(order(r), (std::vector<std::size_t>{3, 1, 2, 0}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 1, 1, 1}));
}

TEST(RankPredicted, NoErrorRanksByTimeAndEqualTimesByHeadroom) {
  const std::vector<PredictedPlan> plans = {{0.3, 0.1}, {0.1, 0.9}, {0.2, 0.5}, {0.1, 0.2}};
  const auto r = rank_predicted(plans, 0.0);
  EXPECT_EQ(order(r), (std::vector<std::size_t>{3, 1, 2, 0}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 1, 3, 4}));
  EXPECT_TRUE(rank_predicted({}, 0.05).empty());
}

TEST(SummarizeRounds, MedianAndRelativeHalfRange) {
  const MeasuredPlan m = summarize_rounds({0.110, 0.100, 0.090});
  EXPECT_TRUE(m.measured);
  EXPECT_DOUBLE_EQ(m.median_s, 0.100);
  EXPECT_NEAR(m.spread, 0.10, 1e-12);  // (0.110 - 0.090) / 2 / 0.100
  const MeasuredPlan even = summarize_rounds({0.4, 0.2});
  EXPECT_DOUBLE_EQ(even.median_s, 0.3);
  EXPECT_NEAR(even.spread, 1.0 / 3, 1e-12);
  const MeasuredPlan one = summarize_rounds({0.5});
  EXPECT_TRUE(one.measured);
  EXPECT_TRUE(std::isinf(one.spread));
  EXPECT_FALSE(summarize_rounds({}).measured);
}

TEST(RankMeasured, ReRanksOnlyOnDifferencesLargerThanTheSpread) {
  // Predicted #1 measures 0.100 +- 10% (0.090..0.110), #2 0.095 +- 2% (0.0931..0.0969): the ranges overlap,
  // so #1 keeps its place (tied). #3 measures 0.080 +- 5% (0.076..0.084): clearly faster than both, first.
  const std::vector<MeasuredPlan> plans = {summarize_rounds({0.090, 0.100, 0.110}),
                                           summarize_rounds({0.0931, 0.095, 0.0969}),
                                           summarize_rounds({0.076, 0.080, 0.084})};
  EXPECT_FALSE(clearly_faster(plans[1], plans[0]));
  EXPECT_TRUE(clearly_faster(plans[2], plans[0]));
  const auto r = rank_measured(plans);
  EXPECT_EQ(order(r), (std::vector<std::size_t>{2, 0, 1}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 2, 2}));
  EXPECT_FALSE(r[0].tied);
  EXPECT_TRUE(r[1].tied && r[2].tied);
}

TEST(RankMeasured, TightSpreadsReRankOnSmallDifferences) {
  // 1% apart with spreads of 0.2%: the measurement decides.
  const std::vector<MeasuredPlan> plans = {summarize_rounds({0.1010, 0.1012, 0.1014}),
                                           summarize_rounds({0.1000, 0.1001, 0.1002})};
  EXPECT_EQ(order(rank_measured(plans)), (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(places(rank_measured(plans)), (std::vector<int>{1, 2}));
}

TEST(RankMeasured, OneRoundHasNoSpreadAndChangesNothing) {
  // The case: one pass measured 1043 ms, the next 454 ms; from one round nothing can be concluded.
  const std::vector<MeasuredPlan> plans = {summarize_rounds({1.043}), summarize_rounds({0.454})};
  EXPECT_EQ(order(rank_measured(plans)), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(places(rank_measured(plans)), (std::vector<int>{1, 1}));
}

TEST(RankMeasured, FailedPlansGoLastInPredictedOrder) {
  const std::vector<MeasuredPlan> plans = {MeasuredPlan{}, summarize_rounds({0.3, 0.3}), MeasuredPlan{},
                                           summarize_rounds({0.1, 0.1})};
  const auto r = rank_measured(plans);
  EXPECT_EQ(order(r), (std::vector<std::size_t>{3, 1, 0, 2}));
  EXPECT_EQ(places(r), (std::vector<int>{1, 2, 3, 3}));
}

TEST(RankMeasured, KeepsPredictedOrderBetweenOverlapsAndMovesOnlyTheClearlyFaster) {
  // #1 0.100 +- 3%, #2 0.1015 +- 1% (overlaps #1), #3 0.097 +- 0.5% (clear of #2 but not of #1): #3 may not pass
  // #1, but passes #2.
  const std::vector<MeasuredPlan> plans = {{true, 0.100, 0.03}, {true, 0.1015, 0.01}, {true, 0.097, 0.005}};
  EXPECT_FALSE(clearly_faster(plans[2], plans[0]));
  EXPECT_TRUE(clearly_faster(plans[2], plans[1]));
  EXPECT_EQ(order(rank_measured(plans)), (std::vector<std::size_t>{0, 2, 1}));
}

TEST(TrialSettled, NeedsTheMinimumRoundsAndEverySpreadUnderTheBound) {
  EXPECT_FALSE(trial_settled({{0.1, 0.1}, {0.2, 0.2}}, 0.05, 3));       // too few rounds
  EXPECT_TRUE(trial_settled({{0.1, 0.1, 0.1}, {0.2, 0.21, 0.2}}, 0.05, 3));  // 2.4% <= 5%
  EXPECT_FALSE(trial_settled({{0.1, 0.1, 0.1}, {0.2, 0.3, 0.2}}, 0.05, 3));  // 25%
  EXPECT_TRUE(trial_settled({{0.1, 0.1, 0.1}, {}}, 0.05, 3));           // a failed plan does not hold it up
  EXPECT_FALSE(trial_settled({{0.1}}, 0.05, 1));                        // one round: no spread yet
}

}  // namespace
}  // namespace cleave::planner::plan_ranking_test
