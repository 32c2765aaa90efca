// Timeline statistics (definitions in timeline.hpp).
#include "pipeline/timeline.hpp"

#include <algorithm>
#include <limits>

namespace cleave::pipeline {

bool is_work(ActionKind kind) { return !is_communication(kind); }

int peak_activations(const std::vector<Action>& actions) {
  int live = 0, peak = 0;
  for (const auto& a : actions) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++live);
    if (frees_stash(a.kind)) --live;
  }
  return peak;
}

TimelineStats timeline_stats(const Timeline& timeline) {
  TimelineStats stats;
  const double inf = std::numeric_limits<double>::infinity();
  double start = inf, end = -inf;
  for (const auto& rank : timeline.ranks) {
    for (const auto& t : rank) {
      start = std::min(start, t.start);
      end = std::max(end, t.end);
    }
  }
  if (start == inf) return stats;  // no actions at all
  stats.start = start;
  stats.makespan = end - start;

  double idle_total = 0.0, span_total = 0.0, span_idle_total = 0.0;
  for (int r = 0; r < static_cast<int>(timeline.ranks.size()); ++r) {
    RankStats rs;
    rs.rank = r;
    double first = inf, last = -inf;
    std::vector<Action> order;
    for (const auto& t : timeline.ranks[r]) {
      order.push_back(t.action);
      if (!is_work(t.action.kind)) continue;
      rs.busy += t.end - t.start;
      first = std::min(first, t.start);
      last = std::max(last, t.end);
    }
    rs.peak_activations = peak_activations(order);
    if (first == inf) {  // a rank with no work idles for the whole step
      first = last = start;
    }
    rs.first_start = first;
    rs.last_end = last;
    const double span = last - first;
    stats.longest_span = std::max(stats.longest_span, span);
    rs.bubble_fraction = stats.makespan > 0 ? (stats.makespan - rs.busy) / stats.makespan : 0.0;
    rs.stage_bubble_fraction = span > 0 ? (span - rs.busy) / span : 0.0;
    idle_total += stats.makespan - rs.busy;
    span_total += span;
    span_idle_total += span - rs.busy;
    stats.ranks.push_back(rs);
  }
  const double p = static_cast<double>(timeline.ranks.size());
  stats.bubble_fraction = stats.makespan > 0 && p > 0 ? idle_total / (p * stats.makespan) : 0.0;
  stats.stage_bubble_fraction = span_total > 0 ? span_idle_total / span_total : 0.0;
  return stats;
}

}  // namespace cleave::pipeline
