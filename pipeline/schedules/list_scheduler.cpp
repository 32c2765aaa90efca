// Event-driven list scheduling (the rule and model are in list_scheduler.hpp).
#include "pipeline/schedules/list_scheduler.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::pipeline::detail {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<std::vector<Action>> list_schedule(int p, int m, const ListScheduleCosts& costs,
                                               const ListSchedulePolicy& policy) {
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

  // end times per (stage, micro-batch); kUnknown until decided
  std::vector<std::vector<double>> f_end(np, std::vector<double>(m, kUnknown));
  std::vector<std::vector<double>> i_end(np, std::vector<double>(m, kUnknown));
  std::vector<int> f(np, 0), i(np, 0), w(np, 0);
  std::vector<double> next(np, 0.0);
  std::vector<std::vector<Action>> out(np);

  auto f_arrival = [&](int r) {
    if (r == 0) return 0.0;
    const double end = f_end[r - 1][f[r]];
    return end == kUnknown ? kUnknown : end + costs.transfer[r - 1];
  };
  auto i_arrival = [&](int r) {
    if (r == p - 1) return f_end[r][i[r]];
    const double end = i_end[r + 1][i[r]];
    return end == kUnknown ? kUnknown : end + costs.transfer[r];
  };
  auto finished = [&](int r) { return w[r] == m; };

  std::vector<double> wait_until(np, kUnknown);
  std::vector<bool> waiting(np, false);
  for (;;) {
    double now = kUnknown;
    for (int r = 0; r < p; ++r) {
      if (!finished(r)) now = std::min(now, next[r]);
    }
    if (now == kUnknown) break;  // every rank finished
    for (int r = 0; r < p; ++r) {
      waiting[r] = false;
      if (finished(r) || next[r] != now) continue;
      const bool i_pending = i[r] < f[r];
      const double i_at = i_pending ? i_arrival(r) : kUnknown;
      const double used = (f[r] - i[r]) + policy.weight_stash_fraction * (i[r] - w[r]);
      const bool f_left = f[r] < m;
      const bool f_memory = used + 1.0 <= policy.memory_limit[r] + 1e-9;
      const bool f_allowed = f_left && f_memory && f[r] - i[r] < policy.forward_ahead[r];
      const double f_at = f_allowed ? f_arrival(r) : kUnknown;
      const bool w_pending = w[r] < i[r];

      const bool f_fits = !policy.forward_fits_only || i_at == kUnknown || now + costs.forward[r] <= i_at;
      const bool i_ready = i_pending && i_at <= now;
      const bool f_ready = f_allowed && f_at <= now && f_fits;
      if (i_ready && !(policy.prefer_forward && f_ready)) {
        const double end = now + costs.backward_input[r];
        i_end[r][i[r]] = end;
        out[r].push_back({ActionKind::kBackwardInput, r, i[r]++});
        next[r] = end;
        continue;
      }
      if (f_ready) {
        const double end = now + costs.forward[r];
        f_end[r][f[r]] = end;
        out[r].push_back({ActionKind::kForward, r, f[r]++});
        next[r] = end;
        continue;
      }
      // The next input this rank could use: the I's gradient, or the F's activation unless the F is held back.
      const double input_at = std::min(i_at, f_fits ? f_at : kUnknown);
      const bool memory_bound = f_left && !f_memory;
      const bool fill_gap = policy.defer_weights ? !f_left
                                                 : input_at - now >= policy.weight_fill * costs.backward_weight[r];
      if (w_pending && (memory_bound || fill_gap)) {
        out[r].push_back({ActionKind::kBackwardWeight, r, w[r]++});
        next[r] = now + costs.backward_weight[r];
        continue;
      }
      waiting[r] = true;
      wait_until[r] = kUnknown;
      for (double at : {i_at, f_at}) {
        if (at > now) wait_until[r] = std::min(wait_until[r], at);
      }
    }
    // A waiting rank looks again at its next known arrival or at the next event anywhere (a busy rank's next
    // decision, another waiting rank's known arrival), whichever comes first: an unknown arrival can only
    // become known at such an event.
    double event = kUnknown;
    for (int r = 0; r < p; ++r) {
      if (!finished(r)) event = std::min(event, waiting[r] ? wait_until[r] : next[r]);
    }
    for (int r = 0; r < p; ++r) {
      if (!waiting[r]) continue;
      next[r] = std::min(wait_until[r], event);
      if (!(next[r] != kUnknown && next[r] > now)) {
        std::string state;
        for (int q = 0; q < p; ++q) {
          state += fmt::format(" [r{} f{} i{} w{} next{} waiting{} until{}]", q, f[q], i[q], w[q], next[q],
                               static_cast<bool>(waiting[q]), wait_until[q]);
        }
        CLEAVE_ASSERT(false, "list_schedule stalled at time {} on rank {} (p={} m={}):{}", now, r, p, m, state);
      }
    }
  }
  return out;
}

}  // namespace cleave::pipeline::detail
