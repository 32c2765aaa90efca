// The router's arithmetic (see router.hpp).
#include "layers/moe/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/core/error.hpp"

namespace cleave::layers {
namespace {

using partition::RouterKind;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// One token's scores s[E] (softmax p or sigmoid s) and selection keys (s + bias for sigmoid); returns its logsumexp
// and Σ s.
struct TokenScores {
  double lse, s_sum;
};
TokenScores score_token(const float* l, std::span<const float> bias, const RouterOptions& o, double* s,
                        std::vector<double>& key) {
  const std::int64_t e = o.experts;
  double mx = l[0];
  for (std::int64_t i = 1; i < e; ++i) mx = std::max(mx, static_cast<double>(l[i]));
  double sum = 0.0;
  for (std::int64_t i = 0; i < e; ++i) sum += std::exp(static_cast<double>(l[i]) - mx);
  double s_sum = 0.0;
  for (std::int64_t i = 0; i < e; ++i) {
    s[i] = o.kind == RouterKind::kSoftmax ? std::exp(static_cast<double>(l[i]) - mx) / sum : sigmoid(l[i]);
    s_sum += s[i];
    key[static_cast<std::size_t>(i)] = s[i] + (o.kind == RouterKind::kSigmoid && !bias.empty() ? bias[i] : 0.0);
  }
  return {mx + std::log(sum), s_sum};
}

// One token's k experts into order[0, k) in expert-index order, from its keys (the k largest, ties to the lower
// index; forced: forced_row's experts, slot 0 first); returns the sum of their scores, summed in selection order.
double choose_experts(const double* s, std::vector<double>& key, std::span<const std::int32_t> forced_row,
                      std::int64_t k, std::vector<std::int32_t>& order) {
  // Forced routing: the forced experts' keys lifted above any score (slot 0 highest), so the selection below picks
  // them in slot order.
  for (std::int64_t j = 0; !forced_row.empty() && j < k; ++j) {
    key[static_cast<std::size_t>(forced_row[static_cast<std::size_t>(j)])] += 1e9 * static_cast<double>(k - j);
  }
  // The k largest keys, ties to the lower index (the first k of a stable sort of 0..E-1 by key descending), picked
  // one by one: no sort buffer per token.
  std::iota(order.begin(), order.end(), 0);
  for (std::int64_t j = 0; j < k; ++j) {
    auto best = order.begin() + j;
    for (auto it = best + 1; it != order.end(); ++it) {
      if (key[static_cast<std::size_t>(*it)] > key[static_cast<std::size_t>(*best)]) best = it;
    }
    std::rotate(order.begin() + j, best, best + 1);  // keeps the rest in index order, so ties go to the lower
  }
  double chosen = 0.0;
  for (std::int64_t j = 0; j < k; ++j) chosen += s[order[static_cast<std::size_t>(j)]];
  // The token's slots in expert-index order: the combine sums them in slot order, so by token, then by expert
  // index, whatever the scores' order (a fixed order every layout shares). The normaliser above was summed in
  // selection order.
  std::sort(order.begin(), order.begin() + k);
  return chosen;
}

// The routed-row layout from r.expert, r.weight and r.counts: rows grouped per expert, tokens ascending within an
// expert.
void group_rows(Routing& r, std::vector<std::int64_t>& next) {
  const std::int64_t n = r.tokens, e = r.experts, k = r.top_k;
  next.assign(static_cast<std::size_t>(e), 0);
  for (std::int64_t i = 1; i < e; ++i) next[static_cast<std::size_t>(i)] = next[static_cast<std::size_t>(i - 1)] + r.counts[static_cast<std::size_t>(i - 1)];
  r.row_token.resize(static_cast<std::size_t>(n * k));
  r.row_weight.resize(static_cast<std::size_t>(n * k));
  r.token_row.resize(static_cast<std::size_t>(n * k));
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t j = 0; j < k; ++j) {
      const auto slot = static_cast<std::size_t>(t * k + j);
      const std::int64_t row = next[static_cast<std::size_t>(r.expert[slot])]++;
      r.row_token[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(t);
      r.row_weight[static_cast<std::size_t>(row)] = r.weight[slot];
      r.token_row[slot] = static_cast<std::int32_t>(row);
    }
  }
}

}  // namespace

Routing route(std::span<const float> logits, std::span<const float> bias, const RouterOptions& o,
              std::span<const std::int32_t> forced) {
  Routing r;
  RouterWorkspace ws;
  route_into(r, ws, logits, bias, o, forced);
  return r;
}

void route_into(Routing& r, RouterWorkspace& ws, std::span<const float> logits, std::span<const float> bias,
                const RouterOptions& o, std::span<const std::int32_t> forced) {
  const std::int64_t e = o.experts, k = o.top_k;
  CLEAVE_ASSERT(e > 0 && k > 0 && k <= e && static_cast<std::int64_t>(logits.size()) % e == 0,
                "route: {} logits for {} experts, top {}", logits.size(), e, k);
  CLEAVE_ASSERT(bias.empty() || static_cast<std::int64_t>(bias.size()) == e, "route: bias of {} for {} experts",
                bias.size(), e);
  const std::int64_t n = static_cast<std::int64_t>(logits.size()) / e;
  CLEAVE_ASSERT(forced.empty() || static_cast<std::int64_t>(forced.size()) == n * k, "route: {} forced experts for {} x {}",
                forced.size(), n, k);
  r.tokens = n;
  r.experts = e;
  r.top_k = k;
  r.expert.resize(static_cast<std::size_t>(n * k));
  r.weight.resize(static_cast<std::size_t>(n * k));
  r.counts.assign(static_cast<std::size_t>(e), 0);
  r.scores.resize(static_cast<std::size_t>(n * e));
  r.lse.resize(static_cast<std::size_t>(n));
  r.logits.assign(logits.begin(), logits.end());
  ws.key.resize(static_cast<std::size_t>(e));
  ws.order.resize(static_cast<std::size_t>(e));
  std::vector<double>& key = ws.key;
  std::vector<std::int32_t>& order = ws.order;
  std::vector<double>& mean_q = r.mean_q;
  mean_q.assign(static_cast<std::size_t>(e), 0.0);
  r.balance_counts.clear();
  r.balance_tokens = 0;
  r.aux_loss = 0.0;
  r.z_loss = 0.0;
  double z_sum = 0.0;
  for (std::int64_t t = 0; t < n; ++t) {
    double* s = r.scores.data() + t * e;
    const TokenScores ts = score_token(logits.data() + t * e, bias, o, s, key);
    r.lse[static_cast<std::size_t>(t)] = ts.lse;
    z_sum += ts.lse * ts.lse;
    for (std::int64_t i = 0; i < e; ++i) {
      mean_q[static_cast<std::size_t>(i)] += s[i] / ts.s_sum / static_cast<double>(n);
    }
    const auto forced_row =
        forced.empty() ? forced : forced.subspan(static_cast<std::size_t>(t * k), static_cast<std::size_t>(k));
    const double chosen = choose_experts(s, key, forced_row, k, order);
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t x = order[static_cast<std::size_t>(j)];
      r.expert[static_cast<std::size_t>(t * k + j)] = x;
      r.weight[static_cast<std::size_t>(t * k + j)] = static_cast<float>(o.normalize ? s[x] / chosen : s[x]);
      ++r.counts[static_cast<std::size_t>(x)];
    }
  }
  group_rows(r, ws.next);
  if (n > 0) {
    balance_over(r, r.counts, n, o);
    r.z_loss = o.z_coef * z_sum / static_cast<double>(n);
  }
}

void balance_over(Routing& r, std::span<const std::int64_t> counts, std::int64_t tokens, const RouterOptions& o) {
  const std::int64_t e = r.experts, k = r.top_k;
  CLEAVE_ASSERT(static_cast<std::int64_t>(counts.size()) == e && tokens >= r.tokens,
                "balance_over: {} counts over {} tokens for {} experts and {} tokens", counts.size(), tokens, e,
                r.tokens);
  r.balance_counts.assign(counts.begin(), counts.end());
  r.balance_tokens = tokens;
  double aux = 0.0;
  for (std::int64_t i = 0; i < e && tokens > 0; ++i) {
    aux += static_cast<double>(counts[static_cast<std::size_t>(i)]) / static_cast<double>(tokens * k) *
           r.mean_q[static_cast<std::size_t>(i)];
  }
  r.aux_loss = o.aux_coef * static_cast<double>(e) * aux;
}

namespace {

// Token t's routing weights, w_j = s_j (/ S, the chosen scores' sum when normalize): their gradient dweight into
// the scores' gradient ds.
void add_weight_grads(const Routing& r, std::int64_t t, std::span<const float> dweight, const double* s,
                      bool normalize, std::vector<double>& ds) {
  const std::int64_t k = r.top_k;
  double chosen = 0.0, dot = 0.0;
  for (std::int64_t j = 0; j < k; ++j) {
    const auto slot = static_cast<std::size_t>(t * k + j);
    chosen += s[r.expert[slot]];
    dot += static_cast<double>(dweight[slot]) * static_cast<double>(r.weight[slot]);
  }
  for (std::int64_t j = 0; j < k; ++j) {
    const auto slot = static_cast<std::size_t>(t * k + j);
    const double dw = dweight[slot];
    ds[static_cast<std::size_t>(r.expert[slot])] += normalize ? (dw - dot) / chosen : dw;
  }
}

// The aux loss's gradient into token t's ds: d/dq_e = aux_coef · E · f_e / N, q = s / Σ s (for softmax Σ s = 1);
// dq is scratch [E].
void add_aux_grads(const Routing& r, const double* s, double loss_scale, const RouterOptions& o,
                   std::vector<double>& dq, std::vector<double>& ds) {
  const std::int64_t n = r.tokens, e = r.experts, k = r.top_k;
  double s_sum = 0.0;
  for (std::int64_t i = 0; i < e; ++i) s_sum += s[i];
  double q_dot = 0.0;
  for (std::int64_t i = 0; i < e; ++i) {
    dq[static_cast<std::size_t>(i)] = loss_scale * o.aux_coef * static_cast<double>(e) *
                                      static_cast<double>(r.balance_counts[static_cast<std::size_t>(i)]) /
                                      static_cast<double>(r.balance_tokens * k) / static_cast<double>(n);
    q_dot += dq[static_cast<std::size_t>(i)] * s[i] / s_sum;
  }
  for (std::int64_t i = 0; i < e; ++i) {
    ds[static_cast<std::size_t>(i)] += (dq[static_cast<std::size_t>(i)] - q_dot) / s_sum;
  }
}

// Token t's logits' gradient dl [E]: ds through the scores (softmax or sigmoid), plus the z loss's
// 2 · z_coef · lse · softmax / N.
void logit_grads(const Routing& r, std::int64_t t, const double* s, const std::vector<double>& ds, double loss_scale,
                 const RouterOptions& o, float* dl) {
  const std::int64_t n = r.tokens, e = r.experts;
  const double lse = r.lse[static_cast<std::size_t>(t)];
  double sd = 0.0;
  if (o.kind == partition::RouterKind::kSoftmax) {
    for (std::int64_t i = 0; i < e; ++i) sd += ds[static_cast<std::size_t>(i)] * s[i];
  }
  for (std::int64_t i = 0; i < e; ++i) {
    const double d = ds[static_cast<std::size_t>(i)];
    double g = o.kind == partition::RouterKind::kSoftmax ? s[i] * (d - sd) : d * s[i] * (1.0 - s[i]);
    if (o.z_coef != 0.0) {
      const double logit = r.logits[static_cast<std::size_t>(t * e + i)];
      g += loss_scale * 2.0 * o.z_coef * lse * std::exp(logit - lse) / static_cast<double>(n);
    }
    dl[i] = static_cast<float>(g);
  }
}

}  // namespace

std::vector<float> router_backward(const Routing& r, std::span<const float> dweight, double loss_scale,
                                   const RouterOptions& o, const std::vector<bool>& token_mask) {
  RouterWorkspace ws;
  router_backward_into(ws, r, dweight, loss_scale, o, token_mask);
  return std::move(ws.dlogits);
}

std::span<const float> router_backward_into(RouterWorkspace& ws, const Routing& r, std::span<const float> dweight,
                                            double loss_scale, const RouterOptions& o,
                                            const std::vector<bool>& token_mask) {
  const std::int64_t n = r.tokens, e = r.experts, k = r.top_k;
  CLEAVE_ASSERT(static_cast<std::int64_t>(dweight.size()) == n * k, "router_backward: {} weight gradients for {} x {}",
                dweight.size(), n, k);
  std::vector<float>& out = ws.dlogits;
  out.assign(static_cast<std::size_t>(n * e), 0.0f);
  std::vector<double>& dq = ws.dq;
  std::vector<double>& ds = ws.ds;
  dq.resize(static_cast<std::size_t>(e));
  ds.resize(static_cast<std::size_t>(e));
  for (std::int64_t t = 0; t < n; ++t) {
    if (!token_mask.empty() && !token_mask[static_cast<std::size_t>(t)]) continue;
    const double* s = r.scores.data() + t * e;
    std::fill(ds.begin(), ds.end(), 0.0);
    add_weight_grads(r, t, dweight, s, o.normalize, ds);
    add_aux_grads(r, s, loss_scale, o, dq, ds);
    logit_grads(r, t, s, ds, loss_scale, o, out.data() + t * e);
  }
  return out;
}

double load_imbalance(std::span<const std::int64_t> counts) {
  if (counts.empty()) return 0.0;
  std::int64_t total = 0, most = 0;
  for (std::int64_t c : counts) {
    total += c;
    most = std::max(most, c);
  }
  if (total == 0) return 0.0;
  return static_cast<double>(most) * static_cast<double>(counts.size()) / static_cast<double>(total);
}

}  // namespace cleave::layers
