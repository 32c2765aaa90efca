// cp_core_work: what a context-parallel rank's attention core launches beyond one rank's core ÷ cp, counted by hand
// call by call from layers/context_parallel/ring_attention.cpp and ulysses.cpp (gpt d64, 4 heads, T 16, micro-batch
// 2, tp 1, cp 2: chunks of c = 4 tokens, Tl = 8 local tokens, Q = K = 64 columns), and the sliding window's chunk
// pairs against a brute-force count.
#include <gtest/gtest.h>

#include "partition/cost_parts.hpp"
#include "partition/cp_core_work.hpp"

namespace cleave::partition::cp_core_work_test {
namespace {

BlockSpec block() {
  GptConfig c;
  c.vocab_size = 50;
  c.d_model = 64;
  c.n_layers = 1;
  c.n_heads = 4;
  c.seq_len = 16;
  c.tie_embeddings = false;
  return make_gpt_spec(c).blocks[1];
}

// The model of the file header, by name.
constexpr double kB = 2, kT = 16, kTl = 8, kC = 4, kH = 4, kHd = 16, kQ = 64, kK = 64, kCp = 2, kF32 = 4;
constexpr double kCalls = 5;  // rank 0: chunk 0 sees key chunk 0; chunk 3 sees 0, 1, 2, 3 (2cp + 1)
// attention_forward's own stream (its output and lse) over `rows` query rows of `heads` heads, `s`-byte output.
double forward_stream(double heads, double rows, double s) { return heads * rows * (kHd * s + 4); }

TEST(CpCoreWork, RingForwardCountsEveryCallMergeAndCopy) {
  const CpCoreWork w = cp_core_work(block(), DType::kF32, Recompute::kNone, 1, 2, true, 2);
  const double s = 4;
  const double takes = kB * kTl * (kQ + 2 * kK) * 2 * s;  // q, k, v chunks read and written
  const double fills = kB * kTl * (kQ + kH) * kF32;       // out32 and lse
  const double per_call = forward_stream(kB * kH, kC, kF32) + 3 * kB * kC * (kQ + kH) * kF32;  // call, merge
  const double assemble = kB * kTl * kQ * 2 * s;
  const double share = forward_stream(kB * kH, kT, s) / kCp;
  EXPECT_DOUBLE_EQ(w.forward.extra.stream_bytes, takes + fills + kCalls * per_call + assemble - share);
  EXPECT_DOUBLE_EQ(w.forward.extra.stream_bytes, 76288);
  // take 2 chunks × 3 tensors (one copy_3d for both samples), 4 fills, a call and a merge each, 2 puts, less one
  // rank's kernel.
  EXPECT_DOUBLE_EQ(w.forward.extra.kernels, 6 + 4 + 2 * kCalls + 2 - 1);
  EXPECT_EQ(w.forward.products.gemms.size(), 2 * kCalls);
  // The chunk pairs balance the causal work: the products' FLOPs are one rank's ÷ cp, in smaller launches.
  EXPECT_DOUBLE_EQ(w.forward.products.gemm_flops(), w.forward.replaced.gemm_flops() / kCp);
  EXPECT_GT(w.forward.replaced.gemm_flops(), 0);
  EXPECT_DOUBLE_EQ(w.forward.products.gemms.front().attention_seq, kC);
  EXPECT_EQ(w.rerun.extra.kernels, 0);  // no recomputation
}

TEST(CpCoreWork, RingBackwardAccumulatesPerPairAndAssemblesDqkv) {
  const CpCoreWork w = cp_core_work(block(), DType::kF32, Recompute::kNone, 1, 2, true, 2);
  const double s = 4, cols = kQ + 2 * kK;
  const double take_dout = kB * kTl * kQ * 2 * s;
  const double fills = kB * kTl * cols * kF32;  // dq, dK, dV
  const double per_call = 2 * kB * kH * kC * kHd * kF32 + 2 * kB * kC * cols * kF32;  // rowsum(dO∘O); accumulators
  const double one_rank_write = kB * kTl * cols * s;
  const double puts = kB * kTl * cols * 2 * s;
  const double share = 2 * kB * kH * kT * kHd * s / kCp;
  EXPECT_DOUBLE_EQ(w.input_grad.extra.stream_bytes,
                   take_dout + fills + kCalls * per_call - one_rank_write + puts - share);
  EXPECT_DOUBLE_EQ(w.input_grad.extra.stream_bytes, 106496);
  // dout's 2 chunks taken, 6 fills, 2 kernels per call, 2 chunks × 3 tensors put (each one copy_3d for both samples),
  // less one rank's 2.
  EXPECT_DOUBLE_EQ(w.input_grad.extra.kernels, 2 + 6 + 2 * kCalls + 6 - 2);
  EXPECT_DOUBLE_EQ(w.input_grad.products.gemm_flops(), w.input_grad.replaced.gemm_flops() / kCp);
}

TEST(CpCoreWork, RingUnderBf16WidensAndRoundsItsBlocks) {
  const CpCoreWork w = cp_core_work(block(), DType::kBF16, Recompute::kNone, 1, 2, true, 2);
  const double s = 2;
  const double takes = kB * kTl * (kQ + 2 * kK) * 2 * s;
  const double q_widened = kB * kTl * kQ * (s + kF32);
  const double fills = kB * kTl * (kQ + kH) * kF32;
  const double blocks_widened = kCp * kB * kTl * 2 * kK * (s + kF32);  // each step's K, V
  const double calls = kCalls * (forward_stream(kB * kH, kC, kF32) + 3 * kB * kC * (kQ + kH) * kF32);
  const double out_rounded = kB * kTl * kQ * (kF32 + s);
  const double assemble = kB * kTl * kQ * 2 * s;
  const double share = forward_stream(kB * kH, kT, s) / kCp;
  EXPECT_DOUBLE_EQ(w.forward.extra.stream_bytes,
                   takes + q_widened + fills + blocks_widened + calls + out_rounded + assemble - share);
  EXPECT_DOUBLE_EQ(w.forward.extra.kernels, 6 + 2 + 4 + 4 * kCp + 2 * kCalls + 2 + 2 - 1);
}

// The backward under bf16: dout's chunks widened as they are taken (bf16 read, f32 written, no bf16 copy), q and out
// widened, and dq, dK, dV rounded as they are put into dqkv (f32 read, bf16 written, no rounded copy).
TEST(CpCoreWork, RingBackwardUnderBf16WidensDoutAndRoundsDqkvInTheirCopies) {
  const CpCoreWork w = cp_core_work(block(), DType::kBF16, Recompute::kNone, 1, 2, true, 2);
  const double s = 2, cols = kQ + 2 * kK;
  const double take_dout = kB * kTl * kQ * (s + kF32);
  const double q_out_widened = 2 * kB * kTl * kQ * (s + kF32);
  const double fills = kB * kTl * cols * kF32;
  const double blocks_widened = kCp * kB * kTl * 2 * kK * (s + kF32);
  const double per_call = 2 * kB * kH * kC * kHd * kF32 + 2 * kB * kC * cols * kF32;
  const double one_rank_write = kB * kTl * cols * s;
  const double puts = kB * kTl * cols * (kF32 + s);
  const double share = 2 * kB * kH * kT * kHd * s / kCp;
  EXPECT_DOUBLE_EQ(w.input_grad.extra.stream_bytes, take_dout + q_out_widened + fills + blocks_widened +
                                                        kCalls * per_call - one_rank_write + puts - share);
  // dout's 2 chunks, q and out widened (4), 6 fills, each step's K, V chunks widened (4 × cp), 2 kernels per call,
  // 6 puts, less one rank's 2.
  EXPECT_DOUBLE_EQ(w.input_grad.extra.kernels, 2 + 4 + 6 + 4 * kCp + 2 * kCalls + 6 - 2);
}

TEST(CpCoreWork, RingRecomputationRerunsTheForwardRing) {
  const CpCoreWork none = cp_core_work(block(), DType::kF32, Recompute::kNone, 1, 2, true, 2);
  const CpCoreWork selective = cp_core_work(block(), DType::kF32, Recompute::kSelective, 1, 2, true, 2);
  const CpCoreWork full = cp_core_work(block(), DType::kF32, Recompute::kFull, 1, 2, true, 2);
  const double assemble = kB * kTl * kQ * 2 * 4;
  // Selective: run_forward again from the stashed qkv, without assembling the output.
  EXPECT_DOUBLE_EQ(selective.rerun.extra.stream_bytes, none.forward.extra.stream_bytes - assemble);
  EXPECT_DOUBLE_EQ(selective.rerun.extra.kernels, none.forward.extra.kernels - 2);
  // Full: the block's whole forward, the ring's output assembled.
  EXPECT_DOUBLE_EQ(full.rerun.extra.stream_bytes, none.forward.extra.stream_bytes);
  EXPECT_DOUBLE_EQ(full.rerun.extra.kernels, none.forward.extra.kernels);
  EXPECT_EQ(full.rerun.products.gemms.size(), none.forward.products.gemms.size());
}

TEST(CpCoreWork, AllToAllPermutesEachExchangedTensor) {
  const CpCoreWork w = cp_core_work(block(), DType::kF32, Recompute::kNone, 1, 2, false, 2);
  const double s = 4;
  // seq_to_heads(qkv): cp × 3 parts packed, cp blocks unpacked; heads_to_seq(out): cp packed, cp × 1 unpacked. Each
  // side reads and writes the whole tensor once.
  const double qkv = 2 * kB * kTl * (kQ + 2 * kK) * 2 * s, out = 2 * kB * kTl * kQ * 2 * s;
  EXPECT_DOUBLE_EQ(w.forward.extra.stream_bytes, qkv + out);  // the core's own stream is one rank's ÷ cp
  EXPECT_DOUBLE_EQ(w.forward.extra.stream_bytes, 65536);
  EXPECT_DOUBLE_EQ(w.forward.extra.kernels, kCp * 4 + kCp * 2);
  EXPECT_DOUBLE_EQ(w.input_grad.extra.stream_bytes, qkv + out);  // dout there, dqkv back
  EXPECT_DOUBLE_EQ(w.input_grad.extra.kernels, kCp * 2 + kCp * 4);
  // Heads / cp over all T: one rank's FLOPs ÷ cp, each product over the whole sequence with 1/cp of the heads.
  EXPECT_DOUBLE_EQ(w.forward.products.gemm_flops(), w.forward.replaced.gemm_flops() / kCp);
  EXPECT_DOUBLE_EQ(w.forward.products.gemms.front().batch, kB * kH / kCp);
  EXPECT_DOUBLE_EQ(w.forward.products.gemms.front().attention_seq, kT);
  const CpCoreWork selective = cp_core_work(block(), DType::kF32, Recompute::kSelective, 1, 2, false, 2);
  EXPECT_DOUBLE_EQ(selective.rerun.extra.stream_bytes, 0);  // the core reruns on the exchanged heads
  EXPECT_DOUBLE_EQ(selective.rerun.extra.kernels, 0);
  const CpCoreWork full = cp_core_work(block(), DType::kF32, Recompute::kFull, 1, 2, false, 2);
  EXPECT_DOUBLE_EQ(full.rerun.extra.stream_bytes, qkv + out);
}

TEST(CpCoreWork, NothingAtCpOneOrWithoutAttention) {
  const CpCoreWork one = cp_core_work(block(), DType::kF32, Recompute::kFull, 1, 1, true, 2);
  EXPECT_EQ(one.forward.extra.stream_bytes, 0);
  EXPECT_EQ(one.input_grad.extra.kernels, 0);
  EXPECT_TRUE(one.rerun.products.gemms.empty());
}

TEST(CpCoreWork, ChunkPairsUnderASlidingWindowMatchABruteForceCount) {
  for (const std::int64_t c : {1, 3, 4, 7}) {
    for (const std::int64_t window : {0, 1, 2, 5, 9, 100}) {
      double all = 0;
      const int chunks = 6;
      for (int gi = 0; gi < chunks; ++gi) {
        for (int gj = 0; gj < chunks; ++gj) {
          double brute = 0;
          for (std::int64_t x = 0; x < c; ++x) {
            for (std::int64_t y = 0; y < c; ++y) {
              const std::int64_t i = gi * c + x, j = gj * c + y;
              if (j <= i && (window <= 0 || i - j < window)) brute += 1;
            }
          }
          EXPECT_DOUBLE_EQ(ring_chunk_pairs(c, gi, gj, window), brute) << c << " " << window << " " << gi << " " << gj;
          all += brute;
        }
      }
      EXPECT_DOUBLE_EQ(all, cost_parts::attended_pairs(chunks * c, window)) << c << " " << window;
    }
  }
}

}  // namespace
}  // namespace cleave::partition::cp_core_work_test
