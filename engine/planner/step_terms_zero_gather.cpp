// The zero_gather term (docs/planner.md, "The step, term by term"): ZeRO-3's all-gather of each block's
// parameters before F and before I, prefetched under the compute of the block before it in the pass, and the
// overlap of ZeRO-1/2's after-step gather with the next forward (--overlap-grad-reduce). Invariant: a pass's
// first gather is exposed in full; exposed + hidden = the sum of the gathers.
#include "engine/planner/step_terms.hpp"

#include <algorithm>

namespace cleave::planner {

using partition::Collective;

double zero3_block_gather_s(const TermContext& c, int b) {
  if (c.zero != 3) return 0.0;
  const double experts = block_expert_params(c, b);
  const double rest = block_local_params(c, b) - experts;
  return c.collective_s(Collective::kAllGather, c.act_bytes * rest, c.replicas, *c.dp_link) +
         c.collective_s(Collective::kAllGather, c.act_bytes * experts, c.expert_replicas, *c.dp_link) +
         handoff_wait_s(c, Exchange::kAllGather, c.replicas);  // a meeting of the replicas (time-shared peers)
}

StageGathers zero3_stage_gathers(const TermContext& c, const std::vector<double>& g,
                                 const std::vector<double>& block_forward, const std::vector<double>& block_backward) {
  StageGathers x;
  if (c.zero != 3 || c.replicas <= 1 || g.empty()) return x;
  const std::size_t n = g.size();
  x.forward_s = g.front();
  x.backward_s = g.back();
  double all = g.front();
  for (std::size_t k = 1; k < n; ++k) {
    x.forward_s += std::max(0.0, g[k] - block_forward[k - 1]);
    x.backward_s += std::max(0.0, g[n - 1 - k] - block_backward[n - k]);
    all += g[k];
  }
  x.hidden_forward_s = all - x.forward_s;
  x.hidden_backward_s = all - x.backward_s;
  return x;
}

double overlapped_gather_s(const std::vector<double>& transfer, const std::vector<double>& compute) {
  double gathered = 0, computed = 0, alone = 0;
  for (std::size_t k = 0; k < transfer.size(); ++k) {
    gathered += transfer[k];
    const double block = k < compute.size() ? compute[k] : 0.0;
    computed = std::max(computed, gathered) + block;
    alone += block;
  }
  return std::max(0.0, computed - alone);
}

}  // namespace cleave::planner
