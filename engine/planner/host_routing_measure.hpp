// measure_host_routing: what the host's routing of a moe block costs per token (`cleave profile`,
// partition::MeasuredHostRouting; docs/planner.md, "The host's routing"). For each distinct (experts, top_k) of the
// model's blocks with routed experts, the host work layers/moe/moe_mlp.cpp does per micro-batch, through the same
// functions: forward, layers::route over [N, E] logits (scores, top-k, rows grouped per expert); input gradient,
// route again (the backward re-routes from the stashed logits) and layers::router_backward (the logits' gradient from
// the weights' gradient, with the aux and z losses the model has). Random logits and weight gradients (fixed seed),
// at N = 1, 2 and 4 × the smallest requested micro-batch's b · T tokens, the levels alternated over `rounds` ×
// `repeats` runs after one untimed run each; the median per level, least squares of time over tokens per pass
// (fit_intercept_slope); mean over ranks. Invariant: every rank runs the same sequence (one barrier per (E, k), one
// all-reduce at the end); no block is built; the block table is not touched.
#pragma once

#include "engine/comm/communicator.hpp"
#include "engine/planner/profile_measure.hpp"
#include "partition/measured_costs.hpp"
#include "partition/model_spec.hpp"

namespace cleave::planner {

void measure_host_routing(partition::MeasuredCosts& costs, const partition::ModelSpec& spec,
                          const BlockProfileRequest& request, comm::Communicator* comm);

}  // namespace cleave::planner
