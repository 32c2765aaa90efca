// measure_expert_rows: what one more routed row costs a moe block's routed experts, per pass (`cleave profile`,
// partition::MeasuredExpertRows; docs/planner.md, "Expert parallelism"). For each distinct moe block shape and tp
// width, the experts' own kernels as moe_mlp.cpp runs them (forward: the gate and up grouped GEMMs, the SwiGLU, the
// down grouped GEMM; input gradient: down's, the SwiGLU's backward, gate's and up's accumulated; weight gradient: the
// three grouped weight gradients), on rows spread evenly over the block's E experts, at 1, 2 and 4 times the mean
// rows of the smallest requested micro-batch (b · T · k), each level alternated with the others over `rounds` x
// `repeats` warm runs; the median per level, least squares of time over rows per pass (intercept and per-row slope,
// both >= 0: fit_intercept_slope), mean over ranks. Invariant: every rank runs the same sequence (one barrier per shape and
// one all-reduce at the end); no block is built; the block table is not touched.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/planner/profile_measure.hpp"
#include "partition/measured_costs.hpp"
#include "partition/model_spec.hpp"

namespace cleave::planner {

void measure_expert_rows(partition::MeasuredCosts& costs, const partition::ModelSpec& spec,
                         const BlockProfileRequest& request, comm::Communicator* comm);

// Least squares of y = a + b·x over the points (x not all equal); b floored at 0 (then a is the mean); where a
// would be negative (noise on a steep line), the line through the origin, a = 0 and b = Σxy / Σx² (≥ 0). Returns
// {a, b}, both ≥ 0 for y ≥ 0.
std::pair<double, double> fit_intercept_slope(const std::vector<double>& x, const std::vector<double>& y);

// The fits of a measurement's passes: times[pass][level] holds the timed runs of one pass at level x[level]; each
// pass's upper median per level (median.hpp) fitted over x by fit_intercept_slope. Returns {a, b} per pass, in order.
// measure_expert_rows and measure_host_routing (host_routing_measure.hpp) fit their passes this way.
std::vector<std::pair<double, double>> fit_passes(const std::vector<double>& x,
                                                  std::span<const std::vector<std::vector<double>>> times);

}  // namespace cleave::planner
