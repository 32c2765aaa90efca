// See plan_ranking.hpp.
#include "engine/planner/plan_ranking.hpp"
#include "engine/planner/median.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cleave::planner {

namespace {

// A tie group (indices in time order) ordered by bands of headroom: the plans within `margin` of the lowest remaining
// memory fraction, in time order, then the next band.
std::vector<std::size_t> by_headroom_bands(const std::vector<PredictedPlan>& plans, std::vector<std::size_t> group,
                                           double margin) {
  std::vector<std::size_t> out;
  out.reserve(group.size());
  while (!group.empty()) {
    double lowest = plans[group.front()].memory_fraction;
    for (std::size_t i : group) lowest = std::min(lowest, plans[i].memory_fraction);
    const double bound = lowest + std::max(0.0, margin);
    std::vector<std::size_t> rest;
    for (std::size_t i : group) (plans[i].memory_fraction <= bound ? out : rest).push_back(i);
    group = std::move(rest);
  }
  return out;
}

}  // namespace

std::vector<Placed> rank_predicted(const std::vector<PredictedPlan>& plans, double error, double margin) {
  std::vector<std::size_t> by_time(plans.size());
  std::iota(by_time.begin(), by_time.end(), std::size_t{0});
  std::stable_sort(by_time.begin(), by_time.end(),
                   [&](std::size_t a, std::size_t b) { return plans[a].step_s < plans[b].step_s; });
  std::vector<Placed> out;
  out.reserve(plans.size());
  for (std::size_t first = 0; first < by_time.size();) {
    // The group: the fastest remaining plan and every plan predicted within the error of it.
    const double bound = plans[by_time[first]].step_s * (1.0 + std::max(0.0, error));
    std::size_t end = first + 1;
    while (end < by_time.size() && plans[by_time[end]].step_s <= bound) ++end;
    const std::vector<std::size_t> group = by_headroom_bands(
        plans,
        std::vector<std::size_t>(by_time.begin() + static_cast<std::ptrdiff_t>(first),
                                 by_time.begin() + static_cast<std::ptrdiff_t>(end)),
        margin);
    const int place = static_cast<int>(first) + 1;
    for (std::size_t i : group) out.push_back({i, place, group.size() > 1});
    first = end;
  }
  return out;
}

MeasuredPlan summarize_rounds(const std::vector<double>& round_medians) {
  MeasuredPlan m;
  if (round_medians.empty()) return m;
  m.measured = true;
  m.median_s = median(round_medians);
  if (round_medians.size() >= 2 && m.median_s > 0) {
    const auto [lo, hi] = std::minmax_element(round_medians.begin(), round_medians.end());
    m.spread = (*hi - *lo) / 2 / m.median_s;
  }
  return m;
}

bool clearly_faster(const MeasuredPlan& a, const MeasuredPlan& b) {
  if (!a.measured || !b.measured || !std::isfinite(a.spread) || !std::isfinite(b.spread)) return false;
  return a.median_s * (1 + a.spread) < b.median_s * (1 - b.spread);
}

std::vector<Placed> rank_measured(const std::vector<MeasuredPlan>& plans) {
  std::vector<std::size_t> remaining;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (plans[i].measured) remaining.push_back(i);
  }
  std::vector<Placed> out;
  out.reserve(plans.size());
  while (!remaining.empty()) {
    // The first plan in predicted order that no remaining plan is clearly faster than (one exists: the relation
    // is a strict partial order, so a minimal element does).
    auto pick = std::find_if(remaining.begin(), remaining.end(), [&](std::size_t candidate) {
      return std::none_of(remaining.begin(), remaining.end(),
                          [&](std::size_t other) { return clearly_faster(plans[other], plans[candidate]); });
    });
    const std::size_t i = *pick;
    remaining.erase(pick);
    const bool after_clear_gap = out.empty() || clearly_faster(plans[out.back().index], plans[i]);
    const int place = after_clear_gap ? static_cast<int>(out.size()) + 1 : out.back().place;
    if (!after_clear_gap) out.back().tied = true;
    out.push_back({i, place, !after_clear_gap});
  }
  const int failed_place = static_cast<int>(out.size()) + 1;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (!plans[i].measured) ++failed;
  }
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (!plans[i].measured) out.push_back({i, failed_place, failed > 1});
  }
  return out;
}

bool trial_settled(const std::vector<std::vector<double>>& round_medians, double bound, int min_rounds) {
  for (const auto& rounds : round_medians) {
    if (rounds.empty()) continue;
    if (static_cast<int>(rounds.size()) < min_rounds || !(summarize_rounds(rounds).spread <= bound)) return false;
  }
  return true;
}

}  // namespace cleave::planner
