// Model FLOPs per step, the rate each rank achieves and MFU, as torchtitan and Megatron print them.
//
// Model FLOPs of a step = the cost model's forward + input-gradient + weight-gradient FLOPs of every block
// (partition/cost_model.hpp: GEMMs 2mnk, elementwise work included) per sample, times the global batch, with one
// change so that the figure compares with Megatron's and torchtitan's: attention's Q·Kᵀ and P·V count every one
// of the T² scores, 12·d·T² per block and sample (cost_parts::attention_product_flops_as_peers_count), where the
// cost model counts the pairs the kernels compute (the causal half or a sliding window, and S recomputed in the
// backward) to predict time. Recomputation is NOT counted: the forward a recomputed block reruns is work the
// hardware does (HFU) but not model work (MFU), so turning train.recompute on lowers the rate rather than
// inflating it. For a GPT block this is 24·T·D² + 12·T·D·F + 12·T²·D per sample plus elementwise terms, i.e.
// per token 6 x (the block's GEMM weights) + 12·D·T (Megatron's and torchtitan's 6N + 12·L·d·T), and 6·D·V for
// the LM head.
//
// Achieved FLOP/s per rank = model FLOPs of the step / step time / world size (every rank of every parallel
// axis shares the step's work); MFU = that / the peak FLOP/s of one rank for the run's compute dtype (bf16 under
// device.precision bf16, else f32), from a hardware profile (`cleave train --profile FILE`). Invariant: pure
// functions of their arguments; no peak (0) gives MFU NaN, which metrics.jsonl omits and the console hides.
#pragma once

#include <cstdint>
#include <string>

#include "partition/model_spec.hpp"

namespace cleave::train {

// The peak one rank's MFU is measured against (engine/cli/train.cpp fills it from a profile).
struct PeakFlops {
  double per_rank = 0;  // FLOP/s; 0 = unknown: no MFU
  std::string source;   // "bf16 peak 989.0 TFLOP/s of H100 SXM (profiles/h100_sxm.json)"
};

// Model FLOPs of one sample (forward and both backward passes of every block, no recomputation).
double model_flops_per_sample(const partition::ModelSpec& spec);

struct Throughput {
  double model_flops_per_step = 0;  // over the global batch
  int ranks = 1;                    // the world size
  PeakFlops peak;

  // FLOP/s one rank achieved in a step of `step_ms` milliseconds (NaN for a non-positive time).
  double flops_per_rank(double step_ms) const;
  // flops_per_rank / peak.per_rank; NaN without a peak.
  double mfu(double step_ms) const;
};

Throughput make_throughput(const partition::ModelSpec& spec, std::int64_t global_batch_size, int world_size,
                           PeakFlops peak);

}  // namespace cleave::train
