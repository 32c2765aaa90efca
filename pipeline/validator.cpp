// Schedule validator (checks listed in validator.hpp). Each check returns the first failure it finds as
// a reason plus the actions to mark; validate_schedule() stops at the first failing check and draws the
// grid, so a user sees where in the pipeline the problem is, not just what it is.
#include "pipeline/validator.hpp"

#include <fmt/format.h>

#include <optional>

#include "engine/core/error.hpp"
#include "pipeline/p2p_posting.hpp"

namespace cleave::pipeline {
namespace {

struct Failure {
  std::string reason;
  std::vector<GridMark> marks;
};
using Check = std::optional<Failure>;

Failure fail(std::string reason, std::vector<GridMark> marks = {}) { return Failure{std::move(reason), std::move(marks)}; }
GridMark mark(Location where) { return GridMark{where.rank, where.position}; }

std::string at(const Schedule& s, Location where) {
  return fmt::format("{} (rank {}, position {})", format_action(s.ranks[where.rank][where.position]), where.rank,
                     where.position);
}

bool stage_ok(const Schedule& s, int stage) { return stage >= 0 && stage < s.num_stages; }

Check check_ranges(const Schedule& s) {
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    int optimizer_steps = 0;
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      const std::string token = format_action(a);
      if (has_stage(a.kind) && !stage_ok(s, a.stage)) {
        return fail(fmt::format("{} on rank {}: stage {} is out of range (the schedule has stages 0..{})", token, r,
                                a.stage, s.num_stages - 1),
                    {{r, i}});
      }
      if (has_microbatch(a.kind) && (a.microbatch < 0 || a.microbatch >= s.num_microbatches)) {
        return fail(fmt::format("{} on rank {}: micro-batch {} is out of range (the schedule has micro-batches 0..{})",
                                token, r, a.microbatch, s.num_microbatches - 1),
                    {{r, i}});
      }
      if (has_stage(a.kind) && s.rank_of(a.stage) != r) {
        return fail(fmt::format("{} is listed on rank {} but stage {} is placed on rank {}", token, r, a.stage,
                                s.rank_of(a.stage)),
                    {{r, i}});
      }
      if (a.kind == ActionKind::kOptimizerStep && ++optimizer_steps > 1) {
        return fail(fmt::format("rank {} has more than one OPTIMIZER_STEP", r), {{r, i}});
      }
    }
  }
  return std::nullopt;
}

Check check_duplicates(const Schedule& s, const ActionIndex& index) {
  if (index.duplicates().empty()) return std::nullopt;
  const auto& [first, again] = index.duplicates().front();
  return fail(fmt::format("duplicate action {}: it already appears at rank {}, position {}",
                          at(s, again), first.rank, first.position),
              {mark(first), mark(again)});
}

Check check_complete(const Schedule& s, const ActionIndex& index) {
  for (int stage = 0; stage < s.num_stages; ++stage) {
    for (int j = 0; j < s.num_microbatches; ++j) {
      const Location f = index.find(Action{ActionKind::kForward, stage, j});
      const Location in = index.find(Action{ActionKind::kBackwardInput, stage, j});
      const Location w = index.find(Action{ActionKind::kBackwardWeight, stage, j});
      const Location b = index.find(Action{ActionKind::kBackward, stage, j});
      std::vector<GridMark> present;
      for (Location l : {in, w, b}) {
        if (l.found()) present.push_back(mark(l));
      }
      const std::string where = fmt::format("stage {} micro-batch {}", stage, j);
      if (!f.found()) {
        return fail(fmt::format("{} has no forward ({}F{} is missing)", where, stage, j), present);
      }
      if (b.found() && (in.found() || w.found())) {
        return fail(fmt::format("{} has both a fused backward {}B{} and a split one (I/W)", where, stage, j), present);
      }
      if (!b.found() && !in.found() && !w.found()) {
        return fail(fmt::format("{} has no backward (expected {}B{}, or {}I{} and {}W{})", where, stage, j, stage, j,
                                stage, j),
                    {mark(f)});
      }
      if (!b.found() && !w.found()) {
        return fail(fmt::format("{} has {}I{} but no {}W{}", where, stage, j, stage, j), present);
      }
      if (!b.found() && !in.found()) {
        return fail(fmt::format("{} has {}W{} but no {}I{}", where, stage, j, stage, j), present);
      }
    }
  }
  return std::nullopt;
}

Check check_local_order(const Schedule& s, const ActionIndex& index) {
  for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      for (const auto& need : compute_needs(a, s.num_stages)) {
        const Location where = index.find(need);
        if (where.found() && where.rank == r && where.position > i) {
          return fail(fmt::format("{} on rank {} comes before {}, which it needs (same rank, position {})",
                                  format_action(a), r, describe_need(need), where.position),
                      {{r, i}, mark(where)});
        }
      }
    }
  }
  return std::nullopt;
}

// The receive a consumer needs for one cross-rank need, and the send its producer must issue.
struct Transfer {
  Action recv;
  Action send;
};
Transfer transfer_for(const Action& consumer, const Need& need) {
  if (need.what == Need::What::kForward) {
    return {{ActionKind::kRecvF, consumer.stage, need.microbatch}, {ActionKind::kSendF, need.stage, need.microbatch}};
  }
  return {{ActionKind::kRecvB, consumer.stage, need.microbatch}, {ActionKind::kSendB, need.stage, need.microbatch}};
}

// Every SEND/RECV stands for a boundary between stages on different ranks.
Check check_transfers_cross_ranks(const Schedule& s) {
  const int p = static_cast<int>(s.ranks.size());
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (!is_communication(a.kind)) continue;
      const int peer = comm_partner(a).stage;
      if (!stage_ok(s, peer)) {
        return fail(fmt::format("{} on rank {}: stage {} has no neighbour stage {} to exchange with", format_action(a),
                                r, a.stage, peer),
                    {{r, i}});
      }
      if (s.rank_of(peer) == r) {
        return fail(fmt::format("{} on rank {}: stages {} and {} are both on rank {}, so no transfer is needed",
                                format_action(a), r, a.stage, peer, r),
                    {{r, i}});
      }
    }
  }
  return std::nullopt;
}

// Every cross-rank dependency travels through a SEND after the producer and a RECV before the consumer.
Check check_dependencies_travel(const Schedule& s, const ActionIndex& index) {
  const int p = static_cast<int>(s.ranks.size());
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      for (const auto& need : compute_needs(a, s.num_stages)) {
        const Location producer = index.find(need);
        if (!producer.found() || producer.rank == r) continue;
        const Transfer transfer = transfer_for(a, need);
        const Location recv = index.find(transfer.recv);
        const Location send = index.find(transfer.send);
        if (!recv.found()) {
          return fail(fmt::format("{} on rank {} needs {} from rank {}, but rank {} has no {} before it",
                                  format_action(a), r, describe_need(need), producer.rank, r,
                                  format_action(transfer.recv)),
                      {{r, i}});
        }
        if (recv.position > i) {
          return fail(fmt::format("{} on rank {} comes after {}, which needs the data it receives",
                                  format_action(transfer.recv), r, format_action(a)),
                      {{r, i}, mark(recv)});
        }
        if (!send.found()) {
          return fail(fmt::format("{} on rank {} feeds {} on rank {}, but rank {} has no {} after it",
                                  at(s, producer), producer.rank, format_action(a), r, producer.rank,
                                  format_action(transfer.send)),
                      {mark(producer), mark(recv)});
        }
        if (send.position < producer.position) {
          return fail(fmt::format("{} on rank {} comes before {}, which produces the data it sends",
                                  format_action(transfer.send), send.rank,
                                  format_action(s.ranks[producer.rank][producer.position])),
                      {mark(send), mark(producer)});
        }
      }
    }
  }
  return std::nullopt;
}

// One REDUCE_GRAD per stage after its last W/B.
Check check_reduce_grads(const Schedule& s, const ActionIndex& index) {
  for (int stage = 0; stage < s.num_stages; ++stage) {
    const int r = s.rank_of(stage);
    Location last_grad;
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.stage == stage && frees_stash(a.kind)) last_grad = Location{r, i};
    }
    const Location reduce = index.find(Action{ActionKind::kReduceGrad, stage, -1});
    if (!reduce.found()) {
      std::vector<GridMark> marks;
      if (last_grad.found()) marks.push_back(mark(last_grad));
      return fail(fmt::format("stage {} has no {}REDUCE_GRAD (expected on rank {} after its last W or B)", stage,
                              stage, r),
                  marks);
    }
    if (last_grad.found() && reduce.position < last_grad.position) {
      return fail(fmt::format("{}REDUCE_GRAD on rank {} comes before {}, the stage's last weight gradient", stage, r,
                              at(s, last_grad)),
                  {mark(reduce), mark(last_grad)});
    }
  }
  return std::nullopt;
}

// One OPTIMIZER_STEP closing every rank.
Check check_optimizer_steps(const Schedule& s) {
  const int p = static_cast<int>(s.ranks.size());
  for (int r = 0; r < p; ++r) {
    const auto& actions = s.ranks[r];
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      if (actions[i].kind == ActionKind::kOptimizerStep && i + 1 != static_cast<int>(actions.size())) {
        return fail(fmt::format("OPTIMIZER_STEP on rank {} is at position {} but must be the rank's last action", r, i),
                    {{r, i}});
      }
    }
    if (actions.empty() || actions.back().kind != ActionKind::kOptimizerStep) {
      std::vector<GridMark> marks;
      if (!actions.empty()) marks.push_back({r, static_cast<int>(actions.size()) - 1});
      return fail(fmt::format("rank {} does not end with OPTIMIZER_STEP", r), marks);
    }
  }
  return std::nullopt;
}

Check check_lowered(const Schedule& s, const ActionIndex& index) {
  if (Check c = check_transfers_cross_ranks(s)) return c;
  if (Check c = check_dependencies_travel(s, index)) return c;
  if (Check c = check_reduce_grads(s, index)) return c;
  return check_optimizer_steps(s);
}

Check check_p2p_order(const Schedule& s) {
  const auto violations = p2p_order_violations(s);
  if (violations.empty()) return std::nullopt;
  const P2POrderViolation& v = violations.front();
  std::vector<GridMark> marks;
  if (v.send_position >= 0) marks.push_back({v.sender, v.send_position});
  if (v.recv_position >= 0) marks.push_back({v.receiver, v.recv_position});
  return fail(v.describe(s), marks);
}

}  // namespace

std::string ValidationResult::message(const std::string& schedule_name) const {
  if (ok) return {};
  return fmt::format("schedule '{}' is invalid: {}\n{}", schedule_name, reason, grid);
}

ValidationResult validate_schedule(const Schedule& schedule) {
  ValidationResult result;
  const ActionIndex index(schedule);
  result.run = dry_run(schedule, index);

  Check failure;
  try {
    check_schedule_shape(schedule);
  } catch (const Error& e) {
    failure = fail(e.what());
  }
  if (!failure) failure = check_ranges(schedule);
  if (!failure) failure = check_duplicates(schedule, index);
  if (!failure) failure = check_complete(schedule, index);
  if (!failure) failure = check_local_order(schedule, index);
  if (!failure && schedule.is_lowered()) failure = check_lowered(schedule, index);
  if (!failure && schedule.is_lowered()) failure = check_p2p_order(schedule);
  if (!failure && !result.run.finished) {
    std::vector<GridMark> marks;
    for (int r = 0; r < static_cast<int>(schedule.ranks.size()); ++r) {
      if (result.run.stuck_at[r] < static_cast<int>(schedule.ranks[r].size())) {
        marks.push_back({r, result.run.stuck_at[r]});
      }
    }
    failure = fail(fmt::format("deadlock in the dry run after {} step{}: {}", result.run.num_steps,
                               result.run.num_steps == 1 ? "" : "s", result.run.stuck_reason),
                   marks);
  }
  if (!failure) return result;

  result.ok = false;
  result.reason = failure->reason;
  result.marks = failure->marks;
  GridOptions options;
  options.marks = result.marks;
  options.max_rows = 60;
  options.context = 8;
  result.grid = format_grid(schedule, result.run, options);
  return result;
}

void check_schedule(const Schedule& schedule) {
  const ValidationResult result = validate_schedule(schedule);
  if (!result.ok) throw Error(result.message(schedule.name));
}

}  // namespace cleave::pipeline
