// The optimizer term (docs/planner.md, "The step, term by term"): the busiest rank's OPTIMIZER_STEP as the
// trainer runs it (engine/train/step_tail.hpp): the exact gradient norm's sum of squares over the rank's share of
// the gradients, the clipping scale (optimizer.grad_clip > 0), the update over its parameters ZeRO-sharded, at the
// profile's measured seconds per parameter, else the update's streamed bytes over the memory bandwidth.
// Invariant: priced at the core sharing, as every compute term.
#include "engine/planner/step_terms.hpp"

#include "partition/measured_costs.hpp"

namespace cleave::planner {

double optimizer_step_s(const TermContext& c, double local_params, double expert_params) {
  const config::RunConfig& config = *c.config;
  const partition::MeasuredCosts& measured = c.profile->measured;
  // The update streams the value and gradient in and the value out, and each state tensor in and out (f32).
  const double bytes_per_param = 4.0 * (3 + 2 * config.optimizer.state_tensors_per_param());
  // ZeRO: each replica updates its shard (of the experts, its expert-dp group's shard).
  const int shards = c.zero >= 1 ? c.replicas : 1;
  const int expert_shards = c.zero >= 1 ? c.expert_replicas : 1;
  const double updated = (local_params - expert_params) / shards + expert_params / expert_shards;
  double seconds = updated * bytes_per_param / c.profile->memory_bandwidth_Bps;
  if (measured.adamw_s_per_param > 0) {  // timed by `cleave profile`
    const double per_param = config.optimizer.type == config::OptimizerType::kAdamw ? measured.adamw_s_per_param
                             : config.optimizer.momentum != 0.0 ? measured.sgd_momentum_s_per_param
                                                                : measured.sgd_s_per_param;
    seconds = updated * per_param;
    // The norm: with any dp each rank sums its dp shard of every gradient (ZeRO or not); the clip scales what the
    // rank updates. The clip runs only on steps whose norm exceeds the limit: the planner cannot know the norm and
    // prices every step as one that clips. Profiles from before these were timed hold 0 for both.
    const double normed = c.replicas > 1 ? (local_params - expert_params) / c.replicas +
                                               expert_params / c.expert_replicas
                                         : local_params;
    seconds += normed * measured.grad_norm_s_per_param;
    if (config.optimizer.grad_clip > 0) seconds += updated * measured.grad_clip_s_per_param;
  }
  return seconds * c.core_sharing / c.compute_stretch;  // its timing's medians keep the lost time slices
}

}  // namespace cleave::planner
