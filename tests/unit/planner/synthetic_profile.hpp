// The planner tests' made-up machines: a profile named "test" whose rates the test states, so that the costs it
// expects follow from its own numbers (no measured or shipped profile). A test sets any further field on the result.
#pragma once

#include "engine/planner/hardware_profile.hpp"

namespace cleave::testing {

// `flops` per second in f32 and bf16, memory at `memory_Bps`, the link within a node of `ranks_per_node` ranks and
// the link across nodes.
inline planner::HardwareProfile synthetic_profile(double flops, double memory_Bps, planner::Link intra_node,
                                                  planner::Link inter_node, int ranks_per_node) {
  planner::HardwareProfile p;
  p.name = p.source = "test";
  p.flops_f32 = p.flops_bf16 = flops;
  p.memory_bandwidth_Bps = memory_Bps;
  p.intra_node = intra_node;
  p.inter_node = inter_node;
  p.ranks_per_node = ranks_per_node;
  return p;
}

}  // namespace cleave::testing
