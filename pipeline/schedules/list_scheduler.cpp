// Event-driven list scheduling (the rule and model are in list_scheduler.hpp).
#include "pipeline/schedules/list_scheduler.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::pipeline::detail {
namespace {

constexpr double kNotYetKnown = std::numeric_limits<double>::infinity();

void check_inputs(int p, int m, const ListScheduleCosts& costs, const ListSchedulePolicy& policy) {
  const auto np = static_cast<std::size_t>(p);
  CLEAVE_ASSERT(p >= 1 && m >= 1 && costs.forward.size() == np && costs.backward_input.size() == np &&
                    costs.backward_weight.size() == np && costs.transfer.size() == np - 1 &&
                    policy.memory_limit.size() == np && policy.forward_ahead.size() == np,
                "list_schedule: inconsistent sizes for p={} m={}", p, m);
  for (int r = 0; r < p; ++r) {
    CLEAVE_ASSERT(policy.memory_limit[r] >= 1 && policy.forward_ahead[r] >= 1, "list_schedule: rank {} limits < 1",
                  r);
    CLEAVE_ASSERT(policy.weight_stash_fraction > 0 && policy.weight_stash_fraction <= 1,
                  "list_schedule: weight_stash_fraction {} outside (0, 1]", policy.weight_stash_fraction);
    CLEAVE_ASSERT(costs.forward[r] > 0 && costs.backward_input[r] > 0 && costs.backward_weight[r] > 0,
                  "list_schedule: stage {} has a cost <= 0", r);
  }
}

// The scheduler's state: per rank the next F, I and W micro-batch, when it next decides, and whether (and until
// when) it waits; per (stage, micro-batch) the end times decided so far.
class ListScheduler {
 public:
  ListScheduler(int p, int m, const ListScheduleCosts& costs, const ListSchedulePolicy& policy)
      : p_(p), m_(m), costs_(costs), policy_(policy), f_end_(p, std::vector<double>(m, kNotYetKnown)),
        i_end_(p, std::vector<double>(m, kNotYetKnown)), f_(p, 0), i_(p, 0), w_(p, 0), next_(p, 0.0), out_(p),
        wait_until_(p, kNotYetKnown), waiting_(p, false) {}

  std::vector<std::vector<Action>> run() && {
    for (;;) {
      double now = kNotYetKnown;
      for (int r = 0; r < p_; ++r) {
        if (!finished(r)) now = std::min(now, next_[r]);
      }
      if (now == kNotYetKnown) break;  // every rank finished
      for (int r = 0; r < p_; ++r) {
        waiting_[r] = false;
        if (finished(r) || next_[r] != now) continue;
        decide(r, now);
      }
      reschedule_waiting(now);
    }
    return std::move(out_);
  }

 private:
  double f_arrival(int r) const {
    if (r == 0) return 0.0;
    const double end = f_end_[r - 1][f_[r]];
    return end == kNotYetKnown ? kNotYetKnown : end + costs_.transfer[r - 1];
  }
  double i_arrival(int r) const {
    if (r == p_ - 1) return f_end_[r][i_[r]];
    const double end = i_end_[r + 1][i_[r]];
    return end == kNotYetKnown ? kNotYetKnown : end + costs_.transfer[r];
  }
  bool finished(int r) const { return w_[r] == m_; }

  // Rank r, free at `now`, runs its I if ready (unless the policy prefers a ready F), else its F if ready and
  // allowed, else a W when memory binds or the gap to its next input fits one; otherwise it waits.
  void decide(int r, double now) {
    const bool i_pending = i_[r] < f_[r];
    const double i_at = i_pending ? i_arrival(r) : kNotYetKnown;
    const double used = (f_[r] - i_[r]) + policy_.weight_stash_fraction * (i_[r] - w_[r]);
    const bool f_left = f_[r] < m_;
    const bool f_memory = used + 1.0 <= policy_.memory_limit[r] + 1e-9;
    const bool f_allowed = f_left && f_memory && f_[r] - i_[r] < policy_.forward_ahead[r];
    const double f_at = f_allowed ? f_arrival(r) : kNotYetKnown;
    const bool w_pending = w_[r] < i_[r];

    const bool f_fits = !policy_.forward_fits_only || i_at == kNotYetKnown || now + costs_.forward[r] <= i_at;
    const bool i_ready = i_pending && i_at <= now;
    const bool f_ready = f_allowed && f_at <= now && f_fits;
    if (i_ready && !(policy_.prefer_forward && f_ready)) {
      const double end = now + costs_.backward_input[r];
      i_end_[r][i_[r]] = end;
      out_[r].push_back({ActionKind::kBackwardInput, r, i_[r]++});
      next_[r] = end;
      return;
    }
    if (f_ready) {
      const double end = now + costs_.forward[r];
      f_end_[r][f_[r]] = end;
      out_[r].push_back({ActionKind::kForward, r, f_[r]++});
      next_[r] = end;
      return;
    }
    // The next input this rank could use: the I's gradient, or the F's activation unless the F is held back.
    const double input_at = std::min(i_at, f_fits ? f_at : kNotYetKnown);
    const bool memory_bound = f_left && !f_memory;
    const bool fill_gap = policy_.defer_weights ? !f_left
                                                : input_at - now >= policy_.weight_fill * costs_.backward_weight[r];
    if (w_pending && (memory_bound || fill_gap)) {
      out_[r].push_back({ActionKind::kBackwardWeight, r, w_[r]++});
      next_[r] = now + costs_.backward_weight[r];
      return;
    }
    waiting_[r] = true;
    wait_until_[r] = kNotYetKnown;
    for (double at : {i_at, f_at}) {
      if (at > now) wait_until_[r] = std::min(wait_until_[r], at);
    }
  }

  // A waiting rank looks again at its next known arrival or at the next event anywhere (a busy rank's next
  // decision, another waiting rank's known arrival), whichever comes first: an unknown arrival can only
  // become known at such an event.
  void reschedule_waiting(double now) {
    double event = kNotYetKnown;
    for (int r = 0; r < p_; ++r) {
      if (!finished(r)) event = std::min(event, waiting_[r] ? wait_until_[r] : next_[r]);
    }
    for (int r = 0; r < p_; ++r) {
      if (!waiting_[r]) continue;
      next_[r] = std::min(wait_until_[r], event);
      if (!(next_[r] != kNotYetKnown && next_[r] > now)) {
        std::string state;
        for (int q = 0; q < p_; ++q) {
          state += fmt::format(" [r{} f{} i{} w{} next{} waiting{} until{}]", q, f_[q], i_[q], w_[q], next_[q],
                               static_cast<bool>(waiting_[q]), wait_until_[q]);
        }
        CLEAVE_ASSERT(false, "list_schedule stalled at time {} on rank {} (p={} m={}):{}", now, r, p_, m_, state);
      }
    }
  }

  const int p_, m_;
  const ListScheduleCosts& costs_;
  const ListSchedulePolicy& policy_;
  std::vector<std::vector<double>> f_end_, i_end_;  // end times per (stage, micro-batch); kNotYetKnown until decided
  std::vector<int> f_, i_, w_;                       // per rank: its next F, I and W micro-batch
  std::vector<double> next_;                         // per rank: when it next decides
  std::vector<std::vector<Action>> out_;
  std::vector<double> wait_until_;
  std::vector<bool> waiting_;
};

}  // namespace

std::vector<std::vector<Action>> list_schedule(int p, int m, const ListScheduleCosts& costs,
                                               const ListSchedulePolicy& policy) {
  check_inputs(p, m, costs, policy);
  return ListScheduler(p, m, costs, policy).run();
}

}  // namespace cleave::pipeline::detail
