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
    check_cost(c.forward_send_wait, "forward send wait", s);
    check_cost(c.backward_send_wait, "backward send wait", s);
    check_cost(c.forward_all_to_all_own, "forward all-to-all's own time", s);
    check_cost(c.backward_all_to_all_own, "backward all-to-all's own time", s);
    CLEAVE_CHECK(c.forward_all_to_all_own <= c.forward_all_to_all && c.backward_all_to_all_own <= c.backward_all_to_all,
                 "simulate: the all-to-alls' own time of stage {} ({} F, {} I) exceeds the all-to-alls ({} F, {} I)", s,
                 c.forward_all_to_all_own, c.backward_all_to_all_own, c.forward_all_to_all, c.backward_all_to_all);
    CLEAVE_CHECK(c.forward_all_to_all_waits >= 0 && c.backward_all_to_all_waits >= 0,
                 "simulate: all-to-all waits of stage {} are {} (F) and {} (I), expected >= 0", s,
                 c.forward_all_to_all_waits, c.backward_all_to_all_waits);
  }
  CLEAVE_CHECK(std::isfinite(costs.optimizer_step) && costs.optimizer_step >= 0,
               "simulate: optimizer step cost is {}, expected a finite value >= 0", costs.optimizer_step);
  CLEAVE_CHECK(std::isfinite(costs.p2p_latency) && costs.p2p_latency >= 0,
               "simulate: p2p latency is {}, expected a finite value >= 0", costs.p2p_latency);
  CLEAVE_CHECK(std::isfinite(costs.p2p_bandwidth) && costs.p2p_bandwidth >= 0,
               "simulate: p2p bandwidth is {}, expected a finite value >= 0 (0 = infinite)", costs.p2p_bandwidth);
}

// The replay of measured durations: one entry per action of every rank, each finite, and the schedule's own
// transfers (not blocking_p2p's reordering).
void check_action_durations(const Schedule& s, const SimulationCosts& costs) {
  if (costs.action_durations.empty()) return;
  const int p = s.pp_size;
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

// The timing itself, on a lowered, validated schedule (blocking_p2p: already in blocking_order) and its index: an
// event queue of ranks by the time each is free. A rank whose next action needs a SEND (or, blocking, a partner's
// post) that has not happened yet is parked on it, and goes on when that action runs.
class Timing {
 public:
  Timing(Schedule lowered, const ActionIndex& index, const SimulationCosts& costs)
      : index_(index), costs_(costs), p_(lowered.pp_size) {
    result_.lowered = std::move(lowered);
    const Schedule& s = result_.lowered;
    result_.timeline.ranks.resize(p_);
    send_time_.resize(p_);
    post_time_.resize(p_);
    for (int r = 0; r < p_; ++r) {
      result_.timeline.ranks[r].resize(s.ranks[r].size());
      send_time_[r].assign(s.ranks[r].size(), -1.0);
      post_time_[r].assign(s.ranks[r].size(), -1.0);
    }
    next_.assign(p_, 0);
    free_at_.assign(p_, 0.0);
    for (int r = 0; r < p_; ++r) events_.push({0.0, r});
    result_.exposed_all_to_all.assign(p_, 0.0);
    result_.shared_core_all_to_all.assign(p_, 0.0);
  }

  SimulationResult run() && {
    const Schedule& s = result_.lowered;
    while (!events_.empty()) {
      const auto [t, r] = events_.top();
      events_.pop();
      const int i = next_[r];
      if (i >= static_cast<int>(s.ranks[r].size())) continue;
      const Action& a = s.ranks[r][i];
      double start = t;
      const bool pair = starts_overlapped_pair(s, r, static_cast<std::size_t>(i));
      if (is_compute(a.kind) && !inputs_arrived(r, i, pair, start)) continue;
      if (costs_.blocking_p2p && is_communication(a.kind)) {
        run_blocking_batch(r, i, t);
      } else if (pair) {
        run_pair(r, i, start);
      } else {
        run_action(r, i, start);
      }
    }
    check_finished();
    if (!costs_.blocking_p2p) close_receives();
    result_.stats = timeline_stats(result_.timeline);
    return std::move(result_);
  }

 private:
  using Event = std::pair<double, int>;  // (time the rank is free, rank)

  double duration(int r, int i, const Action& a) const {
    if (!costs_.action_durations.empty() && !is_communication(a.kind) && costs_.action_durations[r][i] >= 0) {
      return costs_.action_durations[r][i];
    }
    const auto& stages = costs_.stages;
    switch (a.kind) {
      case ActionKind::kForward: return stages[a.stage].forward;
      case ActionKind::kBackwardInput: return stages[a.stage].backward_input;
      case ActionKind::kBackwardWeight: return stages[a.stage].backward_weight;
      case ActionKind::kBackward: return stages[a.stage].backward_input + stages[a.stage].backward_weight;
      case ActionKind::kReduceGrad: return stages[a.stage].reduce_grad;
      case ActionKind::kOptimizerStep: return costs_.optimizer_step;
      default: return 0.0;
    }
  }
  // The all-to-all inside a compute action (an action alone waits for all of it).
  double all_to_all(const Action& a) const {
    if (a.kind == ActionKind::kForward) return costs_.stages[a.stage].forward_all_to_all;
    if (is_backward_input(a.kind)) return costs_.stages[a.stage].backward_all_to_all;
    return 0.0;
  }
  double total(int r, int i, const Action& a) const {
    const bool replayed = !costs_.action_durations.empty() && costs_.action_durations[r][i] >= 0;
    return duration(r, i, a) + (replayed ? 0.0 : all_to_all(a));  // a replayed duration was measured with it
  }
  double transfer_time(const Action& send) const {
    const int bytes_stage = send.kind == ActionKind::kSendF ? send.stage : send.stage - 1;
    const double bytes = costs_.stages[bytes_stage].output_bytes;
    const StageCost& sender = costs_.stages[send.stage];
    const double wait = send.kind == ActionKind::kSendF ? sender.forward_send_wait : sender.backward_send_wait;
    return costs_.p2p_latency + (costs_.p2p_bandwidth > 0 ? bytes / costs_.p2p_bandwidth : 0.0) + wait;
  }
  // The ranks parked on rank r's action k go on (from when each is free).
  void wake_parked(int r, int k) {
    auto waiting = parked_.find({r, k});
    if (waiting == parked_.end()) return;
    for (int w : waiting->second) events_.push({free_at_[w], w});
    parked_.erase(waiting);
  }
  void finish(int r, int next, double end) {
    free_at_[r] = end;
    next_[r] = next;
    events_.push({end, r});
  }

  // Compute action i of rank r (and, for an overlapped pair, the backward after it): whether every input from
  // another rank has been sent; if so `start` moves to the last one's arrival, else r is parked on the first
  // missing SEND.
  bool inputs_arrived(int r, int i, bool pair, double& start) {
    const Schedule& s = result_.lowered;
    std::vector<Need> needs = compute_needs(s.ranks[r][i], s.num_stages);
    if (pair) {  // a pair starts once the backward's input is there too
      for (const auto& need : compute_needs(s.ranks[r][i + 1], s.num_stages)) needs.push_back(need);
    }
    for (const auto& need : needs) {
      const Location producer = index_.find(need);
      if (producer.rank == r) continue;  // same rank: ran earlier in this list
      const Action send = send_for(need);
      const Location where = index_.find(send);
      CLEAVE_ASSERT(where.found(), "validated schedule lacks {}", format_action(send));
      if (send_time_[where.rank][where.position] < 0) {
        parked_[{where.rank, where.position}].push_back(r);
        return false;
      }
      start = std::max(start, send_time_[where.rank][where.position] + transfer_time(send));
    }
    return true;
  }

  // blocking_p2p: the batch of SEND/RECV actions starting at i, posted at t (the first visit), ends once every
  // partner has posted its end and every transfer is done; until then r is parked on the first partner missing.
  void run_blocking_batch(int r, int i, double t) {
    const Schedule& s = result_.lowered;
    const int n = static_cast<int>(s.ranks[r].size());
    int j = i;
    while (j < n && is_communication(s.ranks[r][j].kind)) ++j;
    if (post_time_[r][i] < 0) {  // posted now: partners parked on any of the batch's actions may go on
      for (int k = i; k < j; ++k) {
        post_time_[r][k] = t;
        if (is_send(s.ranks[r][k].kind)) send_time_[r][k] = t;
        wake_parked(r, k);
      }
    }
    double end = post_time_[r][i];
    std::vector<double> done(static_cast<std::size_t>(j - i), 0.0);
    for (int k = i; k < j; ++k) {
      const Action& own = s.ranks[r][k];
      const Location partner = index_.find(comm_partner(own));
      CLEAVE_ASSERT(partner.found(), "validated schedule lacks the partner of {}", format_action(own));
      const double partner_posted = post_time_[partner.rank][partner.position];
      if (partner_posted < 0) {
        parked_[{partner.rank, partner.position}].push_back(r);
        return;
      }
      const Action send = is_send(own.kind) ? own : comm_partner(own);
      done[static_cast<std::size_t>(k - i)] = std::max(post_time_[r][k], partner_posted) + transfer_time(send);
      end = std::max(end, done[static_cast<std::size_t>(k - i)]);
    }
    for (int k = i; k < j; ++k) {
      result_.timeline.ranks[r][k] = TimedAction{s.ranks[r][k], post_time_[r][k], done[static_cast<std::size_t>(k - i)], {}};
    }
    finish(r, j, end);
  }

  // One side of an overlapped pair: its compute (the W of a B as its tail), all-to-all and waits.
  PairSide pair_side(int r, int i, const Action& a) const {
    const StageCost& c = costs_.stages[a.stage];
    PairSide side;
    side.all_to_all = all_to_all(a);
    side.compute = total(r, i, a) - side.all_to_all;
    const bool forward = a.kind == ActionKind::kForward;
    side.waits = forward ? c.forward_all_to_all_waits : c.backward_all_to_all_waits;
    side.own = std::min(side.all_to_all, forward ? c.forward_all_to_all_own : c.backward_all_to_all_own);
    if (a.kind == ActionKind::kBackward) side.tail = std::min(side.compute, c.backward_weight);
    return side;
  }

  // An overlapped F&B pair at i, i + 1 (time_overlapped_pair): F booked with its exposed all-to-all, the backward
  // after it with its; under kShared each also with its hidden part.
  void run_pair(int r, int i, double start) {
    const Schedule& s = result_.lowered;
    const Action& a = s.ranks[r][i];
    const Action& b = s.ranks[r][i + 1];
    const PairSide f = pair_side(r, i, a), g = pair_side(r, i + 1, b);
    const PairTiming t = time_overlapped_pair(f, g, costs_.pair_cores);
    const bool shared = costs_.pair_cores == PairCores::kShared;
    const double middle = start + f.compute + t.exposed_first + (shared ? t.hidden_first : 0.0);
    const double end = start + t.seconds;
    result_.timeline.ranks[r][i] = TimedAction{a, start, middle, {}};
    result_.timeline.ranks[r][i + 1] = TimedAction{b, middle, end, {}};
    result_.exposed_all_to_all[r] += t.exposed_first + t.exposed_second;
    result_.shared_core_all_to_all[r] += t.shared_core;
    finish(r, i + 2, end);
  }

  // One action alone (compute, tail, or a non-blocking SEND/RECV, which takes no time on its rank).
  void run_action(int r, int i, double start) {
    const Action& a = result_.lowered.ranks[r][i];
    const double end = start + total(r, i, a);
    result_.exposed_all_to_all[r] += all_to_all(a);
    result_.timeline.ranks[r][i] = TimedAction{a, start, end, {}};
    if (is_send(a.kind)) {
      send_time_[r][i] = start;
      wake_parked(r, i);
    }
    finish(r, i + 1, end);
  }

  // Every rank ran its whole list: a validated schedule cannot stall, except on blocking_p2p's deadlocks.
  void check_finished() const {
    const Schedule& s = result_.lowered;
    for (int r = 0; r < p_; ++r) {
      CLEAVE_CHECK(!costs_.blocking_p2p || next_[r] == static_cast<int>(s.ranks[r].size()),
                   "simulate: schedule '{}' ({} micro-batches on {} ranks) deadlocks with blocking point-to-point: rank {} "
                   "waits at {} for a peer that never posts its end (Megatron-LM's blocking p2p runs its own schedules: "
                   "1f1b, and interleaved_1f1b with at least as many micro-batches as ranks)", s.name, s.num_microbatches,
                   p_, r, format_action(s.ranks[r][static_cast<std::size_t>(next_[r])]));
      CLEAVE_ASSERT(next_[r] == static_cast<int>(s.ranks[r].size()),
                    "simulation of a validated schedule stalled on rank {} at {}", r,
                    format_action(s.ranks[r][next_[r]]));
    }
  }

  // A RECV's entry spans from when it was posted to when its data arrived (blocking: set in run_blocking_batch).
  void close_receives() {
    for (int r = 0; r < p_; ++r) {
      for (auto& timed : result_.timeline.ranks[r]) {
        if (!is_recv(timed.action.kind)) continue;
        const Action send = comm_partner(timed.action);
        const Location where = index_.find(send);
        const double arrival = send_time_[where.rank][where.position] + transfer_time(send);
        timed.end = std::max(timed.start, arrival);
      }
    }
  }

  const ActionIndex& index_;
  const SimulationCosts& costs_;
  const int p_;
  SimulationResult result_;
  std::vector<std::vector<double>> send_time_;  // when each SEND ran (-1: not yet)
  std::vector<std::vector<double>> post_time_;  // blocking_p2p: when each SEND/RECV's batch was posted
  std::vector<int> next_;                       // each rank's next action
  std::vector<double> free_at_;                 // when each rank is free
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::map<std::pair<int, int>, std::vector<int>> parked_;  // SEND (or partner) location -> ranks waiting for it
};

SimulationResult time_lowered(Schedule lowered, const ActionIndex& index, const SimulationCosts& costs) {
  check_action_durations(lowered, costs);
  return Timing(std::move(lowered), index, costs).run();
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
