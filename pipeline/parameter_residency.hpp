// ParameterResidency: where a stage's block parameters come from when they are not held in full (ZeRO-3,
// engine/train/parameter_shards.hpp). A StageModule with one calls acquire(i, next) before block i reads its
// parameters (its forward, or its input-gradient half of the backward, which may recompute the forward) and
// release(i) after; `next` is the block the same pass runs after i (-1 when none), whose parameters may be
// fetched meanwhile. The weight-gradient half (backward_weight) reads no parameter values, only what the block
// stashed, so it runs without one.
//
// Invariant: between acquire(i) and release(i) every Param of block i has its compute() tensor defined and
// holding the current values; calls pair up per block and never nest for the same block.
#pragma once

namespace cleave::pipeline {

class ParameterResidency {
 public:
  virtual ~ParameterResidency() = default;
  virtual void acquire(int block, int next) = 0;
  virtual void release(int block) = 0;
};

}  // namespace cleave::pipeline
