// count_exchange: expert parallelism's exchange of routed-row counts before each dispatch (plan_dispatch,
// layers/moe/expert_dispatch.cpp), priced as a latency term and as the meeting where a pass's compute before the
// dispatch is waited for (docs/planner.md, "Waits at meetings"). Invariant: zero at ep 1 and for blocks without
// routed experts; its wait zero when the profile did not measure sync_wait_per_compute, and then every other
// figure is unchanged (peer_sync_wait leaves out only what this term waited).
#include "engine/planner/step_terms.hpp"

#include "partition/measured_costs.hpp"

namespace cleave::planner {

using partition::Collective;
using partition::Recompute;

namespace {

// The part of a pass's compute before the count exchange: all of it but the expert GEMMs' share of what is not the
// attention probabilities' part (expert_imbalance_compute splits the same way).
double before_dispatch(double pass_s, double probabilities_s, double expert_fraction) {
  return pass_s - expert_fraction * (pass_s - probabilities_s);
}

// One exchange of `bytes` of counts per rank over the ep ranks, without its meeting's wait. Inside a node, where the
// profile timed the exchange itself (count_exchange, back to back over its ranks: ranks - 1 messages per rank), that
// time scaled to ep - 1 messages. Else ep - 1 messages of bytes / ep each, (ep - 1)(α + bytes / ep / β): inside a
// node, α and β are the profile's measured point-to-point fit where it has one: the collective fits' intercepts,
// taken from 4 KiB to 4 MiB, are no measure of a 64-byte message's latency (a reduce-scatter fit of 0.1 µs on this
// machine, against 26 µs for the point-to-point fit). Else the ring price of a reduce-scatter of those bytes over the
// ep link (TermContext::collective_s), which is the same figure on a single link.
double count_exchange_s(const TermContext& c, double bytes, int ep) {
  const auto& m = c.profile->measured;
  const bool intra = c.ep_link == &c.profile->intra_node;
  if (m.count_exchange_s > 0 && intra) return m.count_exchange_s * (ep - 1) / (m.count_exchange_ranks - 1);
  if (m.p2p && intra) return (ep - 1) * m.p2p->seconds(bytes / ep);
  return c.collective_s(Collective::kReduceScatter, bytes, ep, *c.ep_link);
}

}  // namespace

CountExchange expert_count_exchange(const TermContext& c, int b, const BlockCompute& compute) {
  CountExchange x;
  const auto& block = c.plan->spec.blocks[static_cast<std::size_t>(b)];
  if (c.choice->ep <= 1 || block.n_experts <= 0) return x;
  const int ep = c.choice->ep;
  const double bytes = 8.0 * static_cast<double>(block.n_experts);  // one int64 per expert, [ep, E / ep]
  const double handoffs = collective_handoffs(Exchange::kAllToAll, ep, c.ranks_per_core);
  const double exchange = count_exchange_s(c, bytes, ep) + ep_meeting_wait_s(c, 1, handoffs);  // a meeting of the ep ranks
  const bool full = c.choice->recompute == Recompute::kFull;
  x.forward_s = exchange;
  x.rerun_s = full ? exchange : 0.0;
  x.bytes = c.micro_batches * (full ? 2 : 1) * bytes * (ep - 1) / ep;
  const double rate = c.profile->measured.sync_wait_per_compute * c.core_sharing;
  if (rate <= 0) return x;
  const double share = expert_gemm_fraction(c, b, c.costs[static_cast<std::size_t>(b)].forward_flops);
  const ProbabilitiesCompute& p = compute.probabilities;
  x.wait_forward_s = rate * before_dispatch(compute.forward_s, p.forward_s, share);
  x.wait_rerun_s = full ? rate * before_dispatch(compute.recompute_s, p.recompute_s, share) : 0.0;
  return x;
}

}  // namespace cleave::planner
