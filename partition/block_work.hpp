// BlockWork: the kernels one block's forward, input-gradient and weight-gradient passes launch, for a roofline
// estimate on hardware Cleave has not measured (a shipped GPU profile): each GEMM as m x n x k (times a batch
// count for the per-head attention GEMMs) and the bytes the elementwise work streams through memory
// (LayerNorm, GELU, softmax, residual adds, bias gradients, cross-entropy), for one micro-batch on one
// tensor-parallel rank (Megatron layout, as cost_model.hpp).
//
// Streamed bytes count what a one-kernel-per-op implementation reads and writes: an op of n elements that
// reads x and writes y moves 2n·b, a backward that reads x and dy and writes dx moves 3n·b; biases are fused
// into the GEMM epilogue (their gradients read dy once). GEMM operands and results are not counted there: the
// roofline prices each GEMM at max(FLOPs / rate, (mk + kn + mn)·batch·b / bandwidth).
// Invariant: the GEMM FLOPs of a pass (2·m·n·k·batch summed) equal the cost model's GEMM FLOPs for that pass
// times the micro-batch, divided by tp (block_work_test checks it against the transformer formulas).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/dtype.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition {

struct Gemm {
  double m = 0, n = 0, k = 0;
  double batch = 1;  // independent GEMMs of this shape launched together (heads x samples)
  double flops() const { return 2.0 * m * n * k * batch; }
  double operand_bytes(double element_bytes) const { return (m * k + k * n + m * n) * batch * element_bytes; }
};

struct PassWork {
  std::vector<Gemm> gemms;
  double stream_bytes = 0;  // elementwise traffic (see the header)
  double gemm_flops() const;
  PassWork& operator+=(const PassWork& other);
};

struct BlockWork {
  PassWork forward, input_grad, weight_grad;
};

// The work of `block` for a micro-batch of `micro_batch` samples on one of `tp` ranks. Recomputation adds the
// rerun to input_grad: selective the attention core's forward (scores, softmax, P·V), full the block's forward.
BlockWork block_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, std::int64_t micro_batch);

}  // namespace cleave::partition
