// Expert-parallel arithmetic (see ep_costs.hpp).
#include "partition/ep_costs.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/core/error.hpp"
#include "partition/families/moe.hpp"

namespace cleave::partition {

double expected_max_standard_normal(int n) {
  if (n <= 1) return 0.0;
  // E[max] = ∫ x · n φ(x) Φ(x)^(n-1) dx; the integrand is negligible outside [-12, 12].
  constexpr int kSteps = 24000;
  constexpr double kLo = -12.0, kHi = 12.0;
  const double h = (kHi - kLo) / kSteps;
  double sum = 0.0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x = kLo + i * h;
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
    const double cdf = 0.5 * std::erfc(-x / std::numbers::sqrt2);
    const double f = x * n * phi * std::pow(cdf, n - 1);
    sum += (i == 0 || i == kSteps) ? 0.5 * f : f;
  }
  return sum * h;
}

double ExpectedMaxTable::at(int n) {
  const auto it = values_.find(n);
  if (it != values_.end()) return it->second;
  const double value = expected_max_standard_normal(n);
  values_.emplace(n, value);
  return value;
}

double expected_ep_imbalance(std::int64_t tokens, std::int64_t experts, std::int64_t top_k, int ep,
                             ExpectedMaxTable* table) {
  CLEAVE_CHECK(experts > 0 && top_k > 0 && top_k <= experts && ep >= 1 && experts % ep == 0,
               "expert parallelism: {} experts, top_k {} and ep {}: need 1 <= top_k <= experts and experts divisible "
               "by ep", experts, top_k, ep);
  if (ep == 1 || tokens <= 0 || top_k == experts) return 1.0;
  const double e = static_cast<double>(experts), k = static_cast<double>(top_k), n = static_cast<double>(tokens);
  const double share = 1.0 / ep;  // E/ep marked experts of E
  const double per_token_var = k * share * (1.0 - share) * (e - k) / (e - 1.0);
  const double mean = n * k * share;
  const double sigma = std::sqrt(n * per_token_var);
  const double c = table != nullptr ? table->at(ep) : expected_max_standard_normal(ep);
  const double expected_max = mean + sigma * std::sqrt(static_cast<double>(ep) / (ep - 1)) * c;
  const double bound = static_cast<double>(std::min<std::int64_t>(top_k, experts / ep)) * ep / k;
  return std::min(bound, expected_max / mean);
}

double workload_ep_imbalance(const ModelSpec& spec, std::int64_t micro, int cp, int ep, ExpectedMaxTable* table) {
  if (ep <= 1) return 1.0;
  for (const BlockSpec& b : spec.blocks) {
    if (b.n_experts > 0) {
      return expected_ep_imbalance(ep * micro * (b.seq_len / std::max(1, cp)), b.n_experts, b.top_k, ep, table);
    }
  }
  return 1.0;
}

double ep_row_bound(std::int64_t experts, std::int64_t top_k, int ep) {
  CLEAVE_CHECK(experts > 0 && top_k > 0 && top_k <= experts && ep >= 1 && experts % ep == 0,
               "expert parallelism: {} experts, top_k {} and ep {}: need 1 <= top_k <= experts and experts divisible "
               "by ep", experts, top_k, ep);
  return static_cast<double>(std::min<std::int64_t>(top_k, experts / ep)) * ep / static_cast<double>(top_k);
}

double workload_ep_row_bound(const ModelSpec& spec, int ep) {
  double bound = 1.0;
  if (ep <= 1) return bound;
  for (const BlockSpec& b : spec.blocks) {
    if (b.n_experts > 0) bound = std::max(bound, ep_row_bound(b.n_experts, b.top_k, ep));
  }
  return bound;
}

std::int64_t EpTraffic::sent(int rank) const {
  std::int64_t s = 0;
  for (int d = 0; d < ep; ++d) s += d == rank ? 0 : at(rank, d);
  return s;
}

std::int64_t EpTraffic::received(int rank) const {
  std::int64_t s = 0;
  for (int src = 0; src < ep; ++src) s += src == rank ? 0 : at(src, rank);
  return s;
}

std::int64_t EpTraffic::computed(int rank) const { return received(rank) + at(rank, rank); }

EpTraffic ep_traffic(const std::vector<std::vector<std::int32_t>>& expert_of_slot, std::int64_t experts, int ep) {
  CLEAVE_CHECK(ep >= 1 && experts > 0 && experts % ep == 0 && static_cast<int>(expert_of_slot.size()) == ep,
               "expert parallelism: {} experts over ep {} with routings of {} ranks: experts must be divisible by ep "
               "and there must be one routing per rank", experts, ep, expert_of_slot.size());
  EpTraffic t;
  t.ep = ep;
  t.rows.assign(static_cast<std::size_t>(ep * ep), 0);
  const std::int64_t per_rank = experts / ep;
  for (int src = 0; src < ep; ++src) {
    for (const std::int32_t expert : expert_of_slot[static_cast<std::size_t>(src)]) {
      CLEAVE_CHECK(expert >= 0 && expert < experts, "expert parallelism: rank {} routed a row to expert {} of {}", src,
                   expert, experts);
      ++t.rows[static_cast<std::size_t>(src * ep + expert / per_rank)];
    }
  }
  return t;
}

EpExchangeBytes ep_exchange_bytes(const BlockSpec& block, DType dtype, double micro, int cp, int ep, double imbalance) {
  EpExchangeBytes x;
  if (block.n_experts <= 0 || ep <= 1) return x;
  x.rows = micro * static_cast<double>(block.seq_len / std::max(1, cp)) * static_cast<double>(block.top_k);
  x.row_bytes = static_cast<double>(block.in_features) * static_cast<double>(dtype_size(dtype));
  x.busiest = imbalance * x.rows * x.row_bytes;
  x.sent_mean = static_cast<double>(ep - 1) / ep * x.rows * x.row_bytes;
  return x;
}

std::int64_t expert_param_count(const BlockSpec& block) {
  if (block.n_experts <= 0) return 0;
  return 3 * block.in_features * block.d_ff * block.n_experts;
}

void add_ep_expert_rows(BlockCost& cost, const BlockSpec& block, DType dtype, Recompute recompute, int tp,
                        EpMemoryImbalance imbalance, bool sequence_parallel) {
  if (block.n_experts <= 0) return;
  CLEAVE_ASSERT(imbalance.stash > 0 && imbalance.peak > 0, "moe block {}: ep memory imbalance {} / {} unresolved",
                block.name, imbalance.stash, imbalance.peak);
  const double b = static_cast<double>(dtype_size(dtype));
  const double mean_rows = static_cast<double>(block.seq_len * block.top_k);
  // What the block holds between its passes is summed over the blocks and micro-batches in flight (the stash
  // figure); its input gradient's phases run one block at a time (the peak figure).
  const double more_rows = (imbalance.stash - 1.0) * mean_rows;
  const double more_peak_rows = (imbalance.peak - 1.0) * mean_rows;
  const double d = static_cast<double>(block.in_features), f = static_cast<double>(block.d_ff / tp);
  // The rows a rank's experts run (layers/moe/moe_mlp.cpp under ep): the forward stash's xp [rows, D] and g, u, h
  // [rows, F / tp] (o is combined back into the rank's own T·k rows); the weight stash's xp, do [rows, D] and
  // dg, du, h [rows, F / tp].
  if (recompute != Recompute::kFull) cost.activation_bytes += std::llround(more_rows * (d + 3.0 * f) * b);
  cost.weight_stash_bytes += std::llround(more_rows * (2.0 * d + 3.0 * f) * b);
  // The input gradient (MoeMlp::backward_input under ep), in two phases on top of dy (and under sequence
  // parallelism its gathered copy [T, D]):
  //   experts: the received d_o [rows, D], dh, dg, du [rows, F / tp] and dxp [rows, D], then the combine's
  //     receive buffer [T·k, D] (the rows back at their tokens' rank) before dxp is freed;
  //   combine: dxp freed, the received d_o, dh, dg, du and the combined dxp [T·k, D] stay (locals of the backward)
  //     beside dx [T, D], the router's f32 and compute-dtype logits' gradients [T, E] and the shared experts'
  //     backward: ep 1's mixture phase (moe_backward_phases) with rows in place of T·k for d_o, dh, dg, du.
  // The busiest rank (imbalance > 1) peaks in the first, a rank receiving few rows in the second. Measured
  // (ExpertParallel.MemoryPlanFollowsTheMeasuredPeakAtEpTimesTp, ep2 x tp2, zipf imbalance 1.531 / 0.656, allocator
  // trace): to the byte on both ranks, GPipe and 1F1B; before, one sum of both phases plus a fitted [T·k, D] put
  // the plan 1.4-1.9% (GPipe) and 2.5-3.5% (1F1B) over the measured activation peak.
  const MoeBackwardPhases phases = moe_backward_phases(block, dtype, recompute, tp, sequence_parallel);
  const bool sp = sequence_parallel && tp > 1;
  const double t = static_cast<double>(block.seq_len), ts = sp ? t / tp : t;
  const double dy = (sp ? ts * d + t * d : t * d) * b;
  const double rows = imbalance.peak * mean_rows;
  double experts = dy + rows * (2.0 * d + 3.0 * f) * b + mean_rows * d * b;
  if (recompute == Recompute::kFull) experts += static_cast<double>(cost.recompute_transient_bytes) - ts * d * b;
  const double combine = static_cast<double>(phases.mixture) + more_peak_rows * (d + 3.0 * f) * b;
  cost.backward_extra_bytes =
      std::max<std::int64_t>(phases.dense, std::llround(std::max(experts, combine)));
}

}  // namespace cleave::partition
