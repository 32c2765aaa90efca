// Event-driven schedule simulator (model in simulator.hpp).
#include "pipeline/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <utility>
#include <vector>

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

// blocking_p2p: the lowered schedule's compute with its transfers where Megatron-LM of 2021 (megatron/schedules.py at
// de7dc40f) puts them. Work actions keep their order; before each unit of compute one batch posts the sends its
// rank's earlier compute left pending and the receives the unit's inputs need (a unit: one action, or under
// `fb_pairs` an F and the backward right after it, forward_backward_pipelining_with_interleaving's steady state, which
// communicates after both); the sends still pending go out before REDUCE_GRAD / OPTIMIZER_STEP and at the end.
Schedule blocking_order(const Schedule& lowered, bool fb_pairs) {
  Schedule out = lowered;
  for (int r = 0; r < lowered.pp_size; ++r) {
    const std::vector<Action>& in = lowered.ranks[static_cast<std::size_t>(r)];
    std::vector<Action>& list = out.ranks[static_cast<std::size_t>(r)];
    list.clear();
    std::vector<Action> pending;  // sends of compute already run
    auto flush = [&](const std::vector<Action>& recvs) {
      list.insert(list.end(), pending.begin(), pending.end());
      list.insert(list.end(), recvs.begin(), recvs.end());
      pending.clear();
    };
    std::size_t i = 0;
    while (i < in.size()) {
      if (is_communication(in[i].kind)) {
        ++i;
        continue;
      }
      if (!is_compute(in[i].kind)) {  // REDUCE_GRAD, OPTIMIZER_STEP
        flush({});
        list.push_back(in[i++]);
        continue;
      }
      std::vector<std::size_t> unit = {i};
      std::size_t after = i + 1;
      while (after < in.size() && is_communication(in[after].kind)) ++after;
      if (fb_pairs && in[i].kind == ActionKind::kForward && after < in.size() &&
          (in[after].kind == ActionKind::kBackward || in[after].kind == ActionKind::kBackwardInput)) {
        unit.push_back(after);
      }
      std::vector<Action> recvs;
      for (std::size_t c : unit) {
        for (const Need& need : compute_needs(in[c], lowered.num_stages)) {
          if (lowered.rank_of(need.stage) != r) recvs.push_back(comm_partner(send_for(need)));
        }
      }
      if (!pending.empty() || !recvs.empty()) flush(recvs);
      for (std::size_t c : unit) {  // the unit, then its sends (the SENDs right after each in the lowered list)
        list.push_back(in[c]);
        for (std::size_t k = c + 1; k < in.size() && is_communication(in[k].kind); ++k) {
          if (is_send(in[k].kind)) pending.push_back(in[k]);
        }
      }
      i = unit.back() + 1;
    }
    flush({});
  }
  return out;
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

namespace {

void check_costs(const Schedule& schedule, const SimulationCosts& costs) {
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
}

// The timing itself, on a lowered, validated schedule (blocking_p2p: already in blocking_order) and its index.
SimulationResult time_lowered(Schedule lowered, const ActionIndex& index, const SimulationCosts& costs) {
  SimulationResult result;
  result.lowered = std::move(lowered);
  const Schedule& s = result.lowered;
  const int p = s.pp_size;

  if (!costs.action_durations.empty()) {
    CLEAVE_CHECK(!costs.blocking_p2p, "simulate: a replay of measured durations keeps the schedule's own transfers; "
                 "blocking_p2p reorders them (use one or the other)");
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
  std::vector<std::vector<double>> post_time(p);  // blocking_p2p: when each SEND/RECV's batch was posted
  for (int r = 0; r < p; ++r) {
    result.timeline.ranks[r].resize(s.ranks[r].size());
    send_time[r].assign(s.ranks[r].size(), -1.0);
    post_time[r].assign(s.ranks[r].size(), -1.0);
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
    if (costs.blocking_p2p && is_communication(a.kind)) {  // a blocking batch: rendezvous with every partner
      const int n = static_cast<int>(s.ranks[r].size());
      int j = i;
      while (j < n && is_communication(s.ranks[r][j].kind)) ++j;
      if (post_time[r][i] < 0) {  // posted now: partners parked on any of the batch's actions may go on
        for (int k = i; k < j; ++k) {
          post_time[r][k] = t;
          if (is_send(s.ranks[r][k].kind)) send_time[r][k] = t;
          auto waiting = parked.find({r, k});
          if (waiting != parked.end()) {
            for (int w : waiting->second) events.push({free_at[w], w});
            parked.erase(waiting);
          }
        }
      }
      bool waiting = false;
      double end = post_time[r][i];
      std::vector<double> done(static_cast<std::size_t>(j - i), 0.0);
      for (int k = i; k < j && !waiting; ++k) {
        const Action& own = s.ranks[r][k];
        const Location partner = index.find(comm_partner(own));
        CLEAVE_ASSERT(partner.found(), "validated schedule lacks the partner of {}", format_action(own));
        const double partner_posted = post_time[partner.rank][partner.position];
        if (partner_posted < 0) {
          parked[{partner.rank, partner.position}].push_back(r);
          waiting = true;
          break;
        }
        const Action send = is_send(own.kind) ? own : comm_partner(own);
        done[static_cast<std::size_t>(k - i)] = std::max(post_time[r][k], partner_posted) + transfer_time(send);
        end = std::max(end, done[static_cast<std::size_t>(k - i)]);
      }
      if (waiting) continue;
      for (int k = i; k < j; ++k) {
        result.timeline.ranks[r][k] = TimedAction{s.ranks[r][k], post_time[r][k], done[static_cast<std::size_t>(k - i)], {}};
      }
      free_at[r] = end;
      next[r] = j;
      events.push({end, r});
      continue;
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
    CLEAVE_CHECK(!costs.blocking_p2p || next[r] == static_cast<int>(s.ranks[r].size()),
                 "simulate: schedule '{}' ({} micro-batches on {} ranks) deadlocks with blocking point-to-point: rank {} "
                 "waits at {} for a peer that never posts its end (Megatron-LM's blocking p2p runs its own schedules: "
                 "1f1b, and interleaved_1f1b with at least as many micro-batches as ranks)", s.name, s.num_microbatches,
                 p, r, format_action(s.ranks[r][static_cast<std::size_t>(next[r])]));
    CLEAVE_ASSERT(next[r] == static_cast<int>(s.ranks[r].size()),
                  "simulation of a validated schedule stalled on rank {} at {}", r,
                  format_action(s.ranks[r][next[r]]));
  }
  // A RECV's entry spans from when it was posted to when its data arrived (blocking: set in the loop).
  for (int r = 0; r < p && !costs.blocking_p2p; ++r) {
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

}  // namespace

SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs) {
  check_costs(schedule, costs);
  Schedule lowered = ensure_lowered(schedule);
  if (costs.blocking_p2p) lowered = blocking_order(lowered, costs.blocking_fb_pairs);
  const ActionIndex index(lowered);
  return time_lowered(std::move(lowered), index, costs);
}

PreparedSchedule::PreparedSchedule(const Schedule& schedule) : lowered_(ensure_lowered(schedule)), index_(lowered_) {}

SimulationResult simulate(const PreparedSchedule& prepared, const SimulationCosts& costs) {
  check_costs(prepared.lowered(), costs);
  if (costs.blocking_p2p) {  // a reordered list of its own (blocking_order), indexed afresh
    Schedule blocking = blocking_order(prepared.lowered(), costs.blocking_fb_pairs);
    const ActionIndex index(blocking);
    return time_lowered(std::move(blocking), index, costs);
  }
  return time_lowered(prepared.lowered(), prepared.index(), costs);
}

}  // namespace cleave::pipeline
