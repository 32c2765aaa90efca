// What a context-parallel rank's attention core launches beyond its 1/cp share of one rank's core, per micro-batch
// and attention block on one tp rank (docs/planner.md, "Context parallelism"). The cost model prices a cp rank's block
// as one rank's ÷ cp with every kernel launched once (planner::block_compute); the cp core runs more than that:
//  - ring (layers/context_parallel/ring_attention.cpp): Tl = T / cp local tokens in two chunks of c = T / 2cp; per
//    rank P chunk pairs whose keys the queries see (2cp + 1 without a window: the rank's chunks gi attend gi + 1 key
//    chunks each), each one attention call on a c-row block (its products priced in the run's dtype, as one rank's core: under bf16
//    the calls read widened f32 copies, but the kernels compute in f32 from either input dtype, so only the copies
//    cost more)
//    and in F one log-sum-exp merge (reads out, lse and the block's part_out, part_lse, writes out, lse: 3 · b · c ·
//    (Q + Hq) f32), in B one backward call (its own rowsum(dO ∘ O) and fused kernel: 2 kernels) that reads and writes
//    the running dq, dK, dV of its chunks (2 · b · c · (Q + 2K) f32) where one rank's kernel writes dqkv once
//    (b · T · (Q + 2K) · s, ÷ cp); around them the chunk copies (take / put: one copy_3d per chunk and tensor for
//    every sample, reading and writing), the fills of the f32 accumulators, and under bf16 the widening copies (q,
//    each step's K/V block, out; dout widened by its take) and the outputs rounded (dq, dK, dV by their put).
//    Selective recomputation reruns the forward ring without assembling its output, full recomputation the whole
//    forward.
//  - all_to_all (layers/context_parallel/ulysses.cpp): each exchange packs cp send blocks (one copy_2d per block and
//    tensor part: q, k, v are 3 parts) and unpacks cp received ones, 4 · b · Tl · W · s bytes over cp · (parts + 1)
//    kernels for a tensor of W columns per token: qkv there and out back in F, dout there and dqkv back in B (full
//    recomputation: F's again; selective reruns the core on the exchanged heads, no exchange); the core runs Hq / cp
//    heads over all T, its products one rank's ÷ cp by FLOPs but each launch 1/cp the size.
// Here b = micro-batch, s = the compute dtype's bytes, Q = Hq·hd and K = Hkv·hd the query and key columns of one tp
// rank. `extra` holds stream bytes and kernels net of the share (the one-rank core's stream ÷ cp and its kernels
// taken out); the products are apart, `products` what the cp core launches against `replaced`, the one-rank core's
// products that the cost model divides by cp. Zero for cp 1 and blocks without attention.
// Invariant: extra + replaced's stream / cp and kernels equal what the cp core's calls stream and launch (counted by
// hand in tests/unit/partition/cp_core_work_test.cpp).
#pragma once

#include <cstdint>

#include "partition/block_work.hpp"
#include "partition/model_spec.hpp"

namespace cleave::partition {

struct CpCorePass {
  PassWork extra;      // stream bytes and kernels beyond one rank's ÷ cp (no GEMMs)
  PassWork products;   // the cp core's attention products as it launches them
  PassWork replaced;   // one rank's core products over the whole sequence (the cost model's share is these ÷ cp)
};

struct CpCoreWork {
  CpCorePass forward, input_grad, rerun;  // rerun: the recomputed forward inside I (empty without recomputation)
};

CpCoreWork cp_core_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, int cp, bool ring,
                        std::int64_t micro_batch);

// The query/key pairs chunk gi of c tokens attends in key chunk gj (causal, with a sliding window of `window` keys, 0:
// none), as the ring's block calls compute them; 0 for a chunk wholly in the future or out of the window.
double ring_chunk_pairs(std::int64_t c, int gi, int gj, std::int64_t window);

}  // namespace cleave::partition
