// How `cleave plan` orders plans it cannot tell apart: the rules, as pure functions of numbers, so that they can be
// tested without a search or a run.
//
// Predicted side (rank_predicted): the model's step time is only good to kPredictionError (relative; see
// docs/planner.md, "Ties"). Plans are grouped from the fastest: the fastest remaining plan and every remaining plan
// predicted within (1 + error) of it form one tie group. Inside a group memory headroom decides where it is material:
// the plans whose fraction of the cap is within `margin` of the group's lowest remaining fraction form a band, in
// time order (faster first, then the search's order), and bands follow from the roomiest up. So a plan at 97% of the
// cap loses to one at 71% 0.3% slower, but a plan 1 KiB lighter of 80 GiB (recompute=selective over none, say) does
// not beat a faster one. Groups keep their order.
//
// Measured side (rank_measured, for `plan --trial`): each plan is run in R interleaved rounds; its figure is the
// median over rounds of each round's median step, and its spread the relative half-range of those round medians,
// (max - min) / 2 / median. Plan A is *clearly faster* than B when A.median (1 + A.spread) < B.median (1 - B.spread):
// their ranges do not overlap (a strict partial order: an interval order, so transitive). The measured order is
// the predicted order changed only where a plan is clearly faster: repeatedly take the first plan, in predicted
// order, that no remaining plan is clearly faster than. A plan with one round has no spread (infinite): it is never
// clearly faster or slower than another and keeps its predicted place. Plans that did not measure go last, in
// predicted order.
//
// Invariant: both functions return a permutation of their input's indices; with every plan tied or indistinct the
// order is the input's (predicted side: headroom first).
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

namespace cleave::planner {

// The model's stated error between two plans' predicted step times (relative): plans predicted within it of the
// fastest of their group are tied. From benchmarks/planner/RESULTS.md: the #1 target (the planner's #1 within 5% of
// the best plan measured) held in every final run, and the top plans are predicted within 1-2% of each other
// while steps move 5-15% from pass to pass.
inline constexpr double kPredictionError = 0.05;

// Headroom that decides a tie (a fraction of the cap, or of the largest peak without one): plans whose peaks are
// within 5% of the cap of each other leave the same room to what the plan does not see (the allocator's slack, a
// CUDA context, another process), so a faster prediction is worth more than that difference.
inline constexpr double kHeadroomMargin = 0.05;

struct PredictedPlan {
  double step_s = 0;           // predicted step time
  double memory_fraction = 0;  // peak memory over the cap (or over the largest peak when there is no cap)
};

struct Placed {
  std::size_t index = 0;  // into the input
  int place = 0;          // 1-based; tied plans share the place of their group's first
  bool tied = false;      // shares its place with another plan
};

// The predicted order with ties (header). `error` >= 0 (0: no ties but exact equality); `margin` >= 0 (0: any
// difference in headroom decides a tie).
std::vector<Placed> rank_predicted(const std::vector<PredictedPlan>& plans, double error = kPredictionError,
                                   double margin = kHeadroomMargin);

struct MeasuredPlan {
  bool measured = false;  // at least one round produced a step time
  double median_s = 0;    // median over rounds of each round's median step
  // Relative half-range of the round medians; infinity with fewer than two rounds.
  double spread = std::numeric_limits<double>::infinity();
};

// The measured figure of a plan from its rounds' median step times (seconds, > 0 each; empty = not measured).
MeasuredPlan summarize_rounds(const std::vector<double>& round_medians);

// A clearly faster than B (header): both measured and their ranges do not overlap.
bool clearly_faster(const MeasuredPlan& a, const MeasuredPlan& b);

// `plans` in predicted order (index 0 = predicted #1); returns the measured order (header). A plan's place is shared
// with the plan before it when that one is not clearly faster; failed plans are placed after every measured one.
std::vector<Placed> rank_measured(const std::vector<MeasuredPlan>& plans);

// Whether interleaved rounds can stop: every plan with rounds (a failed plan has none and is ignored) has at least
// `min_rounds` of them and a spread <= `bound`. True when no plan has a round.
bool trial_settled(const std::vector<std::vector<double>>& round_medians, double bound, int min_rounds);

}  // namespace cleave::planner
