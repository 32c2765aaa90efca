// The memory plan's workspace: the CPU kernels' scratch (the attention kernel's per-thread blocks, bf16 operands
// widened to f32 on the widened GEMM path) and the transient block outputs. Invariant: the scratch figures follow the
// kernels' own sizes (kernels/cpu/flash_attention.cpp, kernels/ops/cpu_f32_view.hpp) for the CPU kernels the run
// resolved (CpuKernels); cpu_attention_scratch_bytes and unresolved_cpu_kernels are declared in memory_plan.hpp.
#pragma once

#include <cstdint>

#include "partition/cost_model.hpp"

namespace cleave::run_plan {

// Bytes of bf16 operands widened into f32 scratch for `micro` samples of `block` on one tp rank (`shard` its costs).
std::int64_t cpu_bf16_widening_bytes(const partition::BlockSpec& block, const partition::BlockCost& shard,
                                     partition::Recompute recompute, int tp, std::int64_t micro);

// The CPU attention kernel's scratch on one rank for an attention block under context parallelism (cp 1: whole
// sequences, cpu_attention_scratch_bytes): all_to_all runs the kernel over the whole sequence on heads / cp (the same
// scratch: a thread's blocks do not depend on the heads); ring over chunk pairs of T / (2cp) tokens, with the forward's
// partial output [b, T / 2cp, D / tp] and log-sum-exp [b, H / tp, T / 2cp] (both f32) held meanwhile; the ring's
// kernel runs on f32 operands, and under bf16 its widened copies (ring_widened_bytes) add to the forward's partials or
// stand alone in the backward, whichever is larger (layers/context_parallel/ring_attention.cpp). Bytes; 0 without
// attention or threads.
std::int64_t cpu_cp_attention_scratch_bytes(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp,
                                            bool ring, int threads, bool bf16);

// The (batch x kv heads) groups of the attention kernel's call on one rank for a micro-batch of `micro` samples:
// kv heads / tp at cp 1, / (tp x cp) under all_to_all (each rank runs its heads over the whole sequence).
std::int64_t attention_kernel_groups(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp);

// Ring attention's f32 copies of bf16 operands (MemoryCategory::kWorkspace), per micro-batch of `micro` samples on one
// rank: the forward's queries [b, T / cp, D / tp] and the held K/V block; the backward's q, out and dout and the held
// K/V block. Both 0 in fp32 (the ring reads its operands in place) and without cp.
struct RingWidened {
  std::int64_t forward = 0, backward = 0;
};
RingWidened ring_widened_bytes(const partition::BlockSpec& block, std::int64_t micro, int tp, int cp, bool bf16);

}  // namespace cleave::run_plan
