// The automatic zero-bubble scheduler (search and guarantees in auto_schedule.hpp).
#include "pipeline/schedules/auto_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "engine/core/error.hpp"
#include "partition/stage_partitioner.hpp"
#include "pipeline/schedules/list_scheduler.hpp"
#include "pipeline/schedules/schedules.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::pipeline {
namespace {

using RankLists = std::vector<std::vector<Action>>;
constexpr double kUnknown = std::numeric_limits<double>::infinity();
constexpr double kTolerance = 1e-9;

// Makespan and longest per-rank span of a one-stage-per-rank compute schedule, by the simulator's rules for
// compute actions (an action starts when its rank is free and its input has arrived). ok = false when the
// order cannot finish (an action waits for one that never runs before it).
struct Timing {
  bool ok = false;
  double makespan = kUnknown;
  double span = kUnknown;

  // Lexicographic: the objective first, the other number breaks ties.
  bool better_than(const Timing& other, AutoScheduleObjective objective) const {
    if (!ok) return false;
    if (!other.ok) return true;
    const bool by_span = objective == AutoScheduleObjective::kSpan;
    const double a = by_span ? span : makespan, b = by_span ? other.span : other.makespan;
    const double a2 = by_span ? makespan : span, b2 = by_span ? other.makespan : other.span;
    if (a < b - kTolerance) return true;
    return a <= b + kTolerance && a2 < b2 - kTolerance;
  }
};

Timing time_order(int p, int m, const RankLists& ranks, const detail::ListScheduleCosts& c) {
  const auto np = static_cast<std::size_t>(p);
  std::vector<std::vector<double>> f_end(np, std::vector<double>(m, kUnknown));
  std::vector<std::vector<double>> i_end(np, std::vector<double>(m, kUnknown));
  std::vector<std::size_t> pos(np, 0);
  std::vector<double> free(np, 0.0), first(np, kUnknown);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < p; ++r) {
      while (pos[r] < ranks[r].size()) {
        const Action& a = ranks[r][pos[r]];
        const int j = a.microbatch;
        double ready = 0.0, duration = 0.0;
        if (a.kind == ActionKind::kForward) {
          ready = r == 0 ? 0.0 : f_end[r - 1][j] + c.transfer[r - 1];
          duration = c.forward[r];
        } else if (a.kind == ActionKind::kBackwardInput) {
          ready = r == p - 1 ? f_end[r][j] : std::max(f_end[r][j], i_end[r + 1][j] + c.transfer[r]);
          duration = c.backward_input[r];
        } else {
          ready = i_end[r][j];
          duration = c.backward_weight[r];
        }
        if (ready == kUnknown) break;
        const double start = std::max(free[r], ready);
        const double end = start + duration;
        if (a.kind == ActionKind::kForward) f_end[r][j] = end;
        if (a.kind == ActionKind::kBackwardInput) i_end[r][j] = end;
        first[r] = std::min(first[r], start);
        free[r] = end;
        ++pos[r];
        changed = true;
      }
    }
  }
  Timing t;
  for (int r = 0; r < p; ++r) {
    if (pos[r] != ranks[r].size()) return t;
  }
  t.ok = true;
  t.makespan = 0.0;
  t.span = 0.0;
  double earliest = kUnknown;
  for (int r = 0; r < p; ++r) {
    earliest = std::min(earliest, first[r]);
    t.span = std::max(t.span, free[r] - first[r]);
  }
  for (int r = 0; r < p; ++r) t.makespan = std::max(t.makespan, free[r] - earliest);
  return t;
}

// Peak weighted stashes of every rank <= limit (1 between F and I, `fraction` between I and W).
bool fits_memory(const RankLists& ranks, int limit, double fraction) {
  for (const auto& actions : ranks) {
    int before_input = 0, before_weight = 0;
    for (const Action& a : actions) {
      if (a.kind == ActionKind::kForward) ++before_input;
      if (a.kind == ActionKind::kBackwardInput) --before_input, ++before_weight;
      if (a.kind == ActionKind::kBackwardWeight) --before_weight;
      if (before_input + fraction * before_weight > limit + 1e-9) return false;
    }
  }
  return true;
}

// 1F1B's order with each B written as I then W (peak min(p − r, m)).
RankLists one_f_one_b_split(int p, int m) {
  RankLists out(static_cast<std::size_t>(p));
  const Schedule fused = one_f_one_b_schedule(p, m);
  for (int r = 0; r < p; ++r) {
    for (const Action& a : fused.ranks[r]) {
      if (a.kind == ActionKind::kBackward) {
        out[r].push_back({ActionKind::kBackwardInput, a.stage, a.microbatch});
        out[r].push_back({ActionKind::kBackwardWeight, a.stage, a.microbatch});
      } else {
        out[r].push_back(a);
      }
    }
  }
  return out;
}

struct Candidate {
  RankLists ranks;
  Timing timing;
  std::string origin;
};

class Search {
 public:
  Search(int p, int m, int limit, double fraction, detail::ListScheduleCosts costs, int budget,
         AutoScheduleObjective objective)
      : p_(p), m_(m), limit_(limit), fraction_(fraction), costs_(std::move(costs)), budget_(budget),
        objective_(objective) {}

  bool better(const Timing& a, const Timing& b) const { return a.better_than(b, objective_); }

  int evaluations() const { return evaluations_; }

  Timing evaluate(const RankLists& ranks) {
    ++evaluations_;
    if (!fits_memory(ranks, limit_, fraction_)) return {};
    return time_order(p_, m_, ranks, costs_);
  }

  // The construction's switches besides the per-rank forward look-ahead.
  struct Switches {
    double weight_fill = 1.0;
    bool fits_only = false, defer = false, prefer_forward = false;
  };

  Candidate construct(const std::vector<int>& forward_ahead, const Switches& sw) {
    const double weight_fill = sw.weight_fill;
    const bool fits_only = sw.fits_only, defer = sw.defer;
    detail::ListSchedulePolicy policy;
    policy.prefer_forward = sw.prefer_forward;
    policy.memory_limit.assign(static_cast<std::size_t>(p_), limit_);
    policy.weight_stash_fraction = fraction_;
    policy.defer_weights = defer;
    policy.forward_ahead = forward_ahead;
    policy.weight_fill = weight_fill;
    policy.forward_fits_only = fits_only;
    Candidate c{detail::list_schedule(p_, m_, costs_, policy), {}, "greedy"};
    c.timing = evaluate(c.ranks);
    CLEAVE_ASSERT(c.timing.ok, "auto_schedule: the construction produced a schedule that cannot run (p={} m={})",
                  p_, m_);
    return c;
  }

  // Step 1 and the look-ahead part of step 3: the constructions over the switch grid, then per-rank forward
  // look-ahead ± 1 until no change helps.
  Candidate best_construction() {
    std::vector<std::vector<int>> patterns;
    auto pattern = [&](auto rule) {
      std::vector<int> ahead;
      for (int r = 0; r < p_; ++r) ahead.push_back(std::clamp(rule(r), 1, limit_));
      patterns.push_back(std::move(ahead));
    };
    pattern([&](int) { return limit_; });
    pattern([&](int r) { return p_ - r; });
    pattern([&](int r) { return 2 * (p_ - r) - 1; });
    // The best pattern for each combination of switches, then a look-ahead descent from each of them (a single
    // descent from the overall best gets stuck in local optima).
    struct Start {
      Candidate candidate;
      Switches switches;
      std::vector<int> ahead;
    };
    std::vector<Start> starts;
    for (bool prefer_forward : {false, true}) {
      for (bool defer : {false, true}) {
        for (double fill : {0.0, 0.5, 1.0}) {
          if (defer && fill != 1.0) continue;  // the threshold is unused when W are kept for the tail
          for (bool fits_only : {false, true}) {
            const Switches sw{fill, fits_only, defer, prefer_forward};
            Start start;
            for (const auto& ahead : patterns) {
              Candidate c = construct(ahead, sw);
              if (better(c.timing, start.candidate.timing)) start = {std::move(c), sw, ahead};
            }
            starts.push_back(std::move(start));
          }
        }
      }
    }
    Candidate best;
    for (Start& start : starts) {
      for (bool improved = true; improved && evaluations_ < budget_;) {
        improved = false;
        for (int r = 0; r < p_ && evaluations_ < budget_; ++r) {
          for (int delta : {-1, 1}) {
            std::vector<int> ahead = start.ahead;
            ahead[r] += delta;
            if (ahead[r] < 1 || ahead[r] > limit_) continue;
            Candidate c = construct(ahead, start.switches);
            if (better(c.timing, start.candidate.timing)) {
              start.candidate = std::move(c);
              start.ahead = std::move(ahead);
              improved = true;
            }
          }
        }
      }
      if (better(start.candidate.timing, best.timing)) best = std::move(start.candidate);
    }
    return best;
  }

  // The order part of step 3: swap two neighbouring actions of different kinds on one rank (a W moves one
  // place, or an F passes an I), keeping what makes the schedule better.
  void improve_order(Candidate& c) {
    for (bool improved = true; improved && evaluations_ < budget_;) {
      improved = false;
      for (int r = 0; r < p_ && evaluations_ < budget_; ++r) {
        auto& actions = c.ranks[r];
        for (std::size_t k = 0; k + 1 < actions.size() && evaluations_ < budget_; ++k) {
          if (actions[k].kind == actions[k + 1].kind) continue;  // keeps per-kind micro-batch order
          if (actions[k].microbatch == actions[k + 1].microbatch) continue;  // F before I before W of one
          std::swap(actions[k], actions[k + 1]);
          const Timing t = evaluate(c.ranks);
          if (better(t, c.timing)) {
            c.timing = t;
            improved = true;
          } else {
            std::swap(actions[k], actions[k + 1]);
          }
        }
      }
    }
  }

 private:
  int p_, m_, limit_;
  double fraction_;
  detail::ListScheduleCosts costs_;
  int budget_;
  AutoScheduleObjective objective_;
  int evaluations_ = 0;
};

void check_positive(double value, const char* what, int stage) {
  CLEAVE_CHECK(std::isfinite(value) && value > 0.0,
               "auto schedule: {} of stage {} is {}, expected a finite value > 0", what, stage, value);
}

// The checks auto_schedule states (auto_schedule.hpp), and the transfer times the construction reads.
detail::ListScheduleCosts checked_costs(int pp_size, int num_microbatches, const AutoScheduleOptions& options) {
  detail::check_generator_args("auto", pp_size, num_microbatches);
  const int p = pp_size;
  const int limit = options.memory_limit == 0 ? p : options.memory_limit;
  CLEAVE_CHECK(limit >= 1,
               "auto schedule: the memory limit must be at least 1 micro-batch stash per rank (0 = pp_size), got {}",
               options.memory_limit);
  const SimulationCosts& sc = options.costs;
  CLEAVE_CHECK(static_cast<int>(sc.stages.size()) == p,
               "auto schedule: the cost table has {} stages but pp_size is {} (one stage per rank)", sc.stages.size(),
               p);
  CLEAVE_CHECK(std::isfinite(sc.p2p_latency) && sc.p2p_latency >= 0,
               "auto schedule: p2p latency is {}, expected a finite value >= 0", sc.p2p_latency);
  CLEAVE_CHECK(std::isfinite(sc.p2p_bandwidth) && sc.p2p_bandwidth >= 0,
               "auto schedule: p2p bandwidth is {}, expected a finite value >= 0 (0 = infinite)", sc.p2p_bandwidth);
  detail::ListScheduleCosts costs;
  for (int s = 0; s < p; ++s) {
    const StageCost& stage = sc.stages[s];
    check_positive(stage.forward, "forward cost", s);
    check_positive(stage.backward_input, "backward-input cost", s);
    check_positive(stage.backward_weight, "backward-weight cost", s);
    CLEAVE_CHECK(std::isfinite(stage.output_bytes) && stage.output_bytes >= 0,
                 "auto schedule: output bytes of stage {} is {}, expected a finite value >= 0", s, stage.output_bytes);
    costs.forward.push_back(stage.forward);
    costs.backward_input.push_back(stage.backward_input);
    costs.backward_weight.push_back(stage.backward_weight);
    if (s + 1 < p) {
      costs.transfer.push_back(sc.p2p_latency + (sc.p2p_bandwidth > 0 ? stage.output_bytes / sc.p2p_bandwidth : 0.0));
    }
  }

  CLEAVE_CHECK(options.weight_stash_fraction > 0 && options.weight_stash_fraction <= 1,
               "auto schedule: weight_stash_fraction must be in (0, 1], got {}", options.weight_stash_fraction);
  return costs;
}
}  // namespace

void check_auto_schedule(int pp_size, int num_microbatches, const AutoScheduleOptions& options) {
  checked_costs(pp_size, num_microbatches, options);
}

AutoScheduleResult auto_schedule(int pp_size, int num_microbatches, const AutoScheduleOptions& options) {
  const detail::ListScheduleCosts costs = checked_costs(pp_size, num_microbatches, options);
  const int p = pp_size, m = num_microbatches;
  const int limit = options.memory_limit == 0 ? p : options.memory_limit;
  Search search(p, m, limit, options.weight_stash_fraction, costs, std::max(options.max_evaluations, 1),
                options.objective);
  Candidate best = search.best_construction();
  AutoScheduleResult result;
  result.greedy_makespan = best.timing.makespan;

  const auto seed = [&](RankLists ranks, const char* origin) {
    Candidate c{std::move(ranks), {}, origin};
    c.timing = search.evaluate(c.ranks);  // not ok when it does not fit the memory limit
    if (search.better(c.timing, best.timing)) best = std::move(c);
  };
  seed(zb_h1_schedule(p, m).ranks, "zb_h1");
  seed(zb_h2_schedule(p, m).ranks, "zb_h2");
  seed(one_f_one_b_split(p, m), "1f1b");
  search.improve_order(best);

  result.schedule =
      make_empty_schedule("auto", p, m, 1, partition::place_stages(p, 1, partition::StagePlacement::kLooped));
  result.schedule.ranks = std::move(best.ranks);
  result.makespan = best.timing.makespan;
  result.span = best.timing.span;
  result.origin = best.origin;
  result.evaluations = search.evaluations();
  return result;
}

Schedule auto_schedule_uniform(int pp_size, int num_microbatches) {
  detail::check_generator_args("auto", pp_size, num_microbatches);
  AutoScheduleOptions options;
  options.costs = SimulationCosts::uniform(pp_size);
  options.memory_limit = pp_size;
  return auto_schedule(pp_size, num_microbatches, options).schedule;
}

}  // namespace cleave::pipeline
