// The profile's probe compute, shared by the sync-wait and time-sharing measurements so both time the same work: a
// 128 x 128 x 128 f32 GEMM on the CPU with a run's backend state (its GEMM primitives kept, as in a training step),
// run `count` times back to back. Invariant: the operands are built once; a run allocates nothing.
#pragma once

#include <memory>

#include "engine/core/tensor.hpp"
#include "engine/planner/stopwatch.hpp"
#include "kernels/ops/ops.hpp"

namespace cleave::planner {

class ProbeGemm {
 public:
  ProbeGemm();
  // Runs the GEMM `count` times back to back; returns the seconds they took.
  double run(int count);

 private:
  std::unique_ptr<ops::DeviceResources> resources_;
  Tensor a_, b_, c_;
};

}  // namespace cleave::planner
