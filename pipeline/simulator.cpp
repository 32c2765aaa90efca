// Event-driven schedule simulator (model in simulator.hpp).
#include "pipeline/simulator.hpp"

#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <utility>

#include "engine/core/error.hpp"
#include "pipeline/dependencies.hpp"
#include "pipeline/lowering.hpp"
#include "pipeline/overlap_schedule.hpp"

namespace cleave::pipeline {
namespace {

void check_cost(double value, const char* what, int stage) {
  CLEAVE_CHECK(std::isfinite(value) && value >= 0.0, "simulate: {} of stage {} is {}, expected a finite value >= 0",
               what, stage, value);
}

// The SEND that carries the data a consumer needs from another rank.
Action send_for(const Need& need) {
  return need.what == Need::What::kForward ? Action{ActionKind::kSendF, need.stage, need.microbatch}
                                           : Action{ActionKind::kSendB, need.stage, need.microbatch};
}

}  // namespace

SimulationCosts SimulationCosts::uniform(int num_stages, double forward, double backward_input,
                                         double backward_weight) {
  SimulationCosts costs;
  StageCost stage;
  stage.forward = forward;
  stage.backward_input = backward_input;
  stage.backward_weight = backward_weight;
  costs.stages.assign(num_stages > 0 ? num_stages : 0, stage);
  return costs;
}

SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs) {
  CLEAVE_CHECK(static_cast<int>(costs.stages.size()) == schedule.num_stages,
               "simulate: the cost table has {} stages but schedule '{}' has {}", costs.stages.size(), schedule.name,
               schedule.num_stages);
  for (int s = 0; s < static_cast<int>(costs.stages.size()); ++s) {
    const StageCost& c = costs.stages[s];
    check_cost(c.forward, "forward cost", s);
    check_cost(c.backward_input, "backward-input cost", s);
    check_cost(c.backward_weight, "backward-weight cost", s);
    check_cost(c.reduce_grad, "reduce-grad cost", s);
    check_cost(c.output_bytes, "output bytes", s);
    check_cost(c.forward_all_to_all, "forward all-to-all", s);
    check_cost(c.backward_all_to_all, "backward all-to-all", s);
  }
  CLEAVE_CHECK(std::isfinite(costs.optimizer_step) && costs.optimizer_step >= 0,
               "simulate: optimizer step cost is {}, expected a finite value >= 0", costs.optimizer_step);
  CLEAVE_CHECK(std::isfinite(costs.p2p_latency) && costs.p2p_latency >= 0,
               "simulate: p2p latency is {}, expected a finite value >= 0", costs.p2p_latency);
  CLEAVE_CHECK(std::isfinite(costs.p2p_bandwidth) && costs.p2p_bandwidth >= 0,
               "simulate: p2p bandwidth is {}, expected a finite value >= 0 (0 = infinite)", costs.p2p_bandwidth);

  SimulationResult result;
  result.lowered = ensure_lowered(schedule);
  const Schedule& s = result.lowered;
  const ActionIndex index(s);
  const int p = s.pp_size;

  if (!costs.action_durations.empty()) {
    CLEAVE_CHECK(static_cast<int>(costs.action_durations.size()) == p,
                 "simulate: action_durations has {} ranks, the schedule {}", costs.action_durations.size(), p);
    for (int r = 0; r < p; ++r) {
      CLEAVE_CHECK(costs.action_durations[r].size() == s.ranks[r].size(),
                   "simulate: action_durations of rank {} has {} entries, its lowered list {} actions", r,
                   costs.action_durations[r].size(), s.ranks[r].size());
      for (double d : costs.action_durations[r]) {
        CLEAVE_CHECK(std::isfinite(d), "simulate: action duration {} on rank {} is not finite", d, r);
      }
    }
  }
  auto duration = [&](int r, int i, const Action& a) {
    if (!costs.action_durations.empty() && !is_communication(a.kind) && costs.action_durations[r][i] >= 0) {
      return costs.action_durations[r][i];
    }
    switch (a.kind) {
      case ActionKind::kForward: return costs.stages[a.stage].forward;
      case ActionKind::kBackwardInput: return costs.stages[a.stage].backward_input;
      case ActionKind::kBackwardWeight: return costs.stages[a.stage].backward_weight;
      case ActionKind::kBackward: return costs.stages[a.stage].backward_input + costs.stages[a.stage].backward_weight;
      case ActionKind::kReduceGrad: return costs.stages[a.stage].reduce_grad;
      case ActionKind::kOptimizerStep: return costs.optimizer_step;
      default: return 0.0;
    }
  };
  // The all-to-all inside a compute action (an action alone waits for all of it).
  auto all_to_all = [&](const Action& a) {
    if (a.kind == ActionKind::kForward) return costs.stages[a.stage].forward_all_to_all;
    if (is_backward_input(a.kind)) return costs.stages[a.stage].backward_all_to_all;
    return 0.0;
  };
  auto total = [&](int r, int i, const Action& a) {
    const bool replayed = !costs.action_durations.empty() && costs.action_durations[r][i] >= 0;
    return duration(r, i, a) + (replayed ? 0.0 : all_to_all(a));  // a replayed duration was measured with it
  };
  auto transfer_time = [&](const Action& send) {
    const int bytes_stage = send.kind == ActionKind::kSendF ? send.stage : send.stage - 1;
    const double bytes = costs.stages[bytes_stage].output_bytes;
    return costs.p2p_latency + (costs.p2p_bandwidth > 0 ? bytes / costs.p2p_bandwidth : 0.0);
  };

  result.timeline.ranks.resize(p);
  std::vector<std::vector<double>> send_time(p);
  for (int r = 0; r < p; ++r) {
    result.timeline.ranks[r].resize(s.ranks[r].size());
    send_time[r].assign(s.ranks[r].size(), -1.0);
  }
  std::vector<int> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  using Event = std::pair<double, int>;  // (time the rank is free, rank)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::map<std::pair<int, int>, std::vector<int>> parked;  // SEND location -> ranks waiting for it
  for (int r = 0; r < p; ++r) events.push({0.0, r});
  result.exposed_all_to_all.assign(p, 0.0);

  while (!events.empty()) {
    const auto [t, r] = events.top();
    events.pop();
    const int i = next[r];
    if (i >= static_cast<int>(s.ranks[r].size())) continue;
    const Action& a = s.ranks[r][i];
    double start = t;
    const bool pair = starts_overlapped_pair(s, r, static_cast<std::size_t>(i));
    if (is_compute(a.kind)) {
      bool waiting = false;
      std::vector<Need> needs = compute_needs(a, s.num_stages);
      if (pair) {  // a pair starts once the backward's input is there too
        for (const auto& need : compute_needs(s.ranks[r][i + 1], s.num_stages)) needs.push_back(need);
      }
      for (const auto& need : needs) {
        const Location producer = index.find(need);
        if (producer.rank == r) continue;  // same rank: ran earlier in this list
        const Action send = send_for(need);
        const Location where = index.find(send);
        CLEAVE_ASSERT(where.found(), "validated schedule lacks {}", format_action(send));
        if (send_time[where.rank][where.position] < 0) {
          parked[{where.rank, where.position}].push_back(r);
          waiting = true;
          break;
        }
        start = std::max(start, send_time[where.rank][where.position] + transfer_time(send));
      }
      if (waiting) continue;
    }
    if (pair) {
      const Action& b = s.ranks[r][i + 1];
      const double a_f = all_to_all(a), a_b = all_to_all(b);
      const double c_f = total(r, i, a) - a_f, c_b = total(r, i + 1, b) - a_b;  // compute of each side
      const double exposed_f = std::max(0.0, a_f - c_b), exposed_b = std::max(0.0, a_b - c_f);
      const double middle = start + c_f + exposed_f, end = middle + c_b + exposed_b;
      result.timeline.ranks[r][i] = TimedAction{a, start, middle, {}};
      result.timeline.ranks[r][i + 1] = TimedAction{b, middle, end, {}};
      result.exposed_all_to_all[r] += exposed_f + exposed_b;
      free_at[r] = end;
      next[r] += 2;
      events.push({end, r});
      continue;
    }
    const double end = start + total(r, i, a);
    result.exposed_all_to_all[r] += all_to_all(a);
    result.timeline.ranks[r][i] = TimedAction{a, start, end, {}};
    if (is_send(a.kind)) {
      send_time[r][i] = start;
      auto waiting = parked.find({r, i});
      if (waiting != parked.end()) {
        for (int w : waiting->second) events.push({free_at[w], w});
        parked.erase(waiting);
      }
    }
    free_at[r] = end;
    ++next[r];
    events.push({end, r});
  }
  for (int r = 0; r < p; ++r) {
    CLEAVE_ASSERT(next[r] == static_cast<int>(s.ranks[r].size()),
                  "simulation of a validated schedule stalled on rank {} at {}", r,
                  format_action(s.ranks[r][next[r]]));
  }
  // A RECV's entry spans from when it was posted to when its data arrived.
  for (int r = 0; r < p; ++r) {
    for (auto& timed : result.timeline.ranks[r]) {
      if (!is_recv(timed.action.kind)) continue;
      const Action send = comm_partner(timed.action);
      const Location where = index.find(send);
      const double arrival = send_time[where.rank][where.position] + transfer_time(send);
      timed.end = std::max(timed.start, arrival);
    }
  }
  result.stats = timeline_stats(result.timeline);
  return result;
}

}  // namespace cleave::pipeline
