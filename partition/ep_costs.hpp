// Expert-parallel costs for the planner and the memory plan (parallel.expert_model_parallel_size, ep; its size
// rules are partition/ep_rules.hpp): pure functions over a moe block's sizes and a routing, no layers, no devices. The planner prices the all-to-alls
// from these figures (engine/planner/step_terms_expert_parallel.cpp, expert_all_to_all) and the memory plan counts a rank's
// experts and the rows it receives (engine/run_plan/memory_plan.cpp); the imbalance benchmark's oracle
// (benchmarks/moe/oracle.py) computes the same counts independently, in Python.
//
// Placement: rank r of an ep group holds the E / ep experts [r·E/ep, (r+1)·E/ep) (contiguous, as Megatron).
// A routed row is one (token, chosen expert) pair; a token whose k experts live on one rank sends k rows there
// (no de-duplication), so a rank of N tokens sends N·k rows per dispatch, (ep - 1) / ep of them off-rank on
// average. Per moe block and micro-batch, four all-to-alls of rows of D values (one tp rank's routing is the
// same as every other's, and each moves whole rows):
//   forward:  dispatch (rows to their experts' ranks)          and combine (expert outputs back to the tokens);
//   backward: the combine's gradient (token rank -> expert rank) and the dispatch's gradient (back again).
// The time of an all-to-all is set by its busiest rank: imbalance = (max over ranks of the rows an expert rank
// receives) / (their mean). The time's default is what uniformly random top-k routing gives
// (expected_ep_imbalance; `cleave plan --ep-imbalance F` sets it); the memory plan's is the bound no routing exceeds
// (ep_row_bound; EpMemoryImbalance) (docs/planner.md, "Expert parallelism" and "Expert parallelism's memory").
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "engine/core/dtype.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition {

// E[max_r X_r] / E[X_r] for X_r the rows the E/ep experts of rank r receive when each of `tokens` tokens (of
// the whole ep group) picks top_k distinct experts of `experts` uniformly at random. Each token adds a
// hypergeometric count to X_r (k draws, E/ep marked, E in all: mean k/ep, variance k·(1/ep)·(1-1/ep)·(E-k)/(E-1));
// the sum over tokens is taken as normal, and the ep loads, which sum to tokens·k, as exchangeable: the
// expected maximum is mean + σ·sqrt(ep/(ep-1))·c(ep), c(ep) = E[max of ep standard normals] (0.5642 at 2,
// 1.0294 at 4). 1 for ep = 1 or top_k = experts; at most the bound min(k, E/ep)·ep / k.
// `table` (optional): c(ep) taken from it (ExpectedMaxTable; the same value, integrated once).
class ExpectedMaxTable;
double expected_ep_imbalance(std::int64_t tokens, std::int64_t experts, std::int64_t top_k, int ep,
                             ExpectedMaxTable* table = nullptr);

// The default imbalance of a model at a layout: expected_ep_imbalance of its first moe block for the tokens one
// micro-batch brings to the ep group (ep · micro · T / cp); 1 for ep 1 or a model without experts.
double workload_ep_imbalance(const ModelSpec& spec, std::int64_t micro, int cp, int ep,
                             ExpectedMaxTable* table = nullptr);

// The most rows one ep rank's experts can run, over the mean, for any routing (dropless: no token is dropped): a
// token sends at most min(k, E/ep) of its k rows to one rank, so a rank runs at most min(k, E/ep) rows per token of
// the group against the mean k / ep: min(k, E/ep) · ep / k (2 at ep 2 and 4 at ep 4 for E 8, k 2). 1 for ep 1.
double ep_row_bound(std::int64_t experts, std::int64_t top_k, int ep);
// The largest ep_row_bound over a model's moe blocks (1 for ep 1 or a model without experts).
double workload_ep_row_bound(const ModelSpec& spec, int ep);

// The imbalances the memory plan sizes expert parallelism's rows at (each the rows a rank's experts run over the
// mean; engine/run_plan/rank_blocks.hpp, docs/planner.md "Expert parallelism's memory"). A rank's peak is its stash
// of every block (and micro-batch) in flight, each at its own rows, plus one block's backward at that block's rows:
//   stash: bounds a rank's stashed rows summed over the blocks and micro-batches it holds, over their mean (the
//     largest, over ranks and steps, of a rank's mean over the blocks of its rows / the block's mean);
//   peak:  bounds one block's rows on one rank (the busiest block's busiest rank, over the steps): the block whose
//     backward forms the peak holds its received rows' gradients at this count.
// 0 in a field: the dropless bound (ep_row_bound), which no routing exceeds. One figure for both (the forced-routing
// tests: every block routed alike) converts implicitly.
struct EpMemoryImbalance {
  double stash = 0;
  double peak = 0;
  EpMemoryImbalance() = default;
  EpMemoryImbalance(double both) : stash(both), peak(both) {}  // NOLINT(google-explicit-constructor): one figure
  EpMemoryImbalance(double stash_f, double peak_f) : stash(stash_f), peak(peak_f) {}
  // Each field 0 replaced by `bound`.
  EpMemoryImbalance or_bound(double bound) const {
    return {stash > 0 ? stash : bound, peak > 0 ? peak : bound};
  }
};

// E[max of n independent standard normals] (numerical integration over 24001 points; 0 for n = 1).
double expected_max_standard_normal(int n);

// expected_max_standard_normal(n) for each n asked, integrated on the first ask and kept: for a caller that prices
// many layouts (the planner's search asks it once per candidate and pp rank; the integration was most of a moe
// search's time). Invariant: at(n) == expected_max_standard_normal(n) bit for bit (n is its only input and the
// integration is deterministic). Not thread-safe: one table per search.
class ExpectedMaxTable {
 public:
  double at(int n);
  std::size_t size() const { return values_.size(); }

 private:
  std::map<int, double> values_;
};

// The rows of one dispatch in an ep group for a known routing: rows[src · ep + dst] = routed rows from the
// tokens of rank src to the experts of rank dst (dst = src included: rows that stay).
struct EpTraffic {
  int ep = 1;
  std::vector<std::int64_t> rows;
  std::int64_t at(int src, int dst) const { return rows[static_cast<std::size_t>(src * ep + dst)]; }
  std::int64_t sent(int rank) const;      // rows rank sends off-rank in the dispatch (= it receives in the combine)
  std::int64_t received(int rank) const;  // rows it receives from other ranks in the dispatch (= sends in combine)
  std::int64_t computed(int rank) const;  // rows its experts run (received + kept)
};
// expert_of_slot[src]: the chosen expert of every (token, slot) of rank src's tokens (any order).
// Throws Error for an expert outside [0, experts) or experts not divisible by ep.
EpTraffic ep_traffic(const std::vector<std::vector<std::int32_t>>& expert_of_slot, std::int64_t experts, int ep);

// Per moe block, per micro-batch of `micro` samples on one rank: what the planner prices.
struct EpExchangeBytes {
  double rows = 0;        // mean routed rows a rank holds before the dispatch: micro · T / cp · k
  double row_bytes = 0;   // D · the compute dtype's bytes
  double busiest = 0;     // bytes the busiest rank moves in one all-to-all: imbalance · rows · row_bytes
  double sent_mean = 0;   // bytes a rank sends off-rank in one all-to-all, on average: (ep-1)/ep · rows · row_bytes
};
EpExchangeBytes ep_exchange_bytes(const BlockSpec& block, DType dtype, double micro, int cp, int ep, double imbalance);

// The routed experts' parameters of a moe block (gate, up, down of all E: 3·D·F·E); 0 for other blocks.
std::int64_t expert_param_count(const BlockSpec& block);

// What ep changes in one moe block's per-sample activations on one tp rank (`cost`: the cost model's, at ep 1):
// the routed-row tensors its experts run on scale from T·k rows to f · T·k rows, the rows the busiest rank
// receives, f = imbalance.stash for what the block holds between its passes (summed over blocks by the walk) and
// imbalance.peak for its input gradient's transient (one block at a time): in the forward stash xp (D) and g, u, h
// (F / tp; o returns to the rank's own T·k rows), in the weight stash xp and do (D) and dg, du, h (F / tp); the
// input gradient's rise is re-costed as the larger of its two ep phases (the experts' backward on the received rows
// with the combine's receive buffer, then the combine with dx and the router's gradients; ep_costs.cpp) and the
// block's dense phase. Call it at ep > 1 only, with both figures resolved (> 0); a no-op for a block without
// experts; under full recomputation the forward stash keeps no rows.
void add_ep_expert_rows(BlockCost& cost, const BlockSpec& block, DType dtype, Recompute recompute, int tp,
                        EpMemoryImbalance imbalance, bool sequence_parallel = false);

}  // namespace cleave::partition
