// BlockWork: the roofline kernels of a block agree with the cost model's GEMM FLOPs (hand formulas), shard
// by tp, scale with the micro-batch, and recomputation adds the rerun to the input-gradient pass.
#include <gtest/gtest.h>

#include <cmath>

#include "partition/block_work.hpp"

namespace cleave::partition::block_work_test {
namespace {

ModelSpec gpt(std::int64_t d, std::int64_t heads, std::int64_t t, std::int64_t vocab) {
  GptConfig c;
  c.vocab_size = vocab;
  c.d_model = d;
  c.n_layers = 1;
  c.n_heads = heads;
  c.seq_len = t;
  c.tie_embeddings = false;
  return make_gpt_spec(c);
}

TEST(BlockWork, TransformerGemmFlopsMatchTheCostModelFormulas) {
  const ModelSpec spec = gpt(64, 4, 16, 50);  // F = 4D = 256
  const double t = 16, d = 64, f = 256;
  const double pairs = t * (t + 1) / 2;  // causal: the kernels skip the masked key blocks
  const BlockWork w = block_work(spec.blocks[1], DType::kBF16, Recompute::kNone, 1, 1);
  EXPECT_DOUBLE_EQ(w.forward.gemm_flops(), 8 * t * d * d + 4 * t * d * f + 4 * pairs * d);
  // The memory-efficient attention's backward recomputes Q·Kᵀ: 10PD.
  EXPECT_DOUBLE_EQ(w.input_grad.gemm_flops(), 8 * t * d * d + 4 * t * d * f + 10 * pairs * d);
  EXPECT_DOUBLE_EQ(w.weight_grad.gemm_flops(), 8 * t * d * d + 4 * t * d * f);
  // Streamed: LN 2·(2TD) fwd, residuals 2·3TD, GELU 2TF in bf16 (2 bytes); the attention writes out [T, D] and
  // lse [H, T] f32 once (no [H, T, T] stream).
  EXPECT_DOUBLE_EQ(w.forward.stream_bytes, 2 * (4 * t * d + 6 * t * d + 2 * t * f) + t * (2 * d + 4 * 4));
  // LN 2·3TD, residuals 2·3TD, GELU 3TF; the attention's D = rowsum(dO * O) reads two [T, D].
  EXPECT_DOUBLE_EQ(w.input_grad.stream_bytes, 2 * (6 * t * d + 6 * t * d + 3 * t * f) + 2 * 2 * t * d);
  // Bias grads (3D + D + F + D)·T, LN weights 2·2TD.
  EXPECT_DOUBLE_EQ(w.weight_grad.stream_bytes, 2 * ((5 * d + f) * t + 4 * t * d));
}

TEST(BlockWork, TensorParallelShardsHalveGemmsAndMicroBatchesScaleThem) {
  const ModelSpec spec = gpt(64, 4, 16, 50);
  for (const BlockSpec& block : spec.blocks) {
    const BlockWork one = block_work(block, DType::kF32, Recompute::kNone, 1, 1);
    const BlockWork tp2 = block_work(block, DType::kF32, Recompute::kNone, 2, 1);
    const BlockWork m3 = block_work(block, DType::kF32, Recompute::kNone, 1, 3);
    EXPECT_DOUBLE_EQ(tp2.forward.gemm_flops() * 2, one.forward.gemm_flops()) << block.name;
    EXPECT_DOUBLE_EQ(tp2.input_grad.gemm_flops() * 2, one.input_grad.gemm_flops()) << block.name;
    EXPECT_DOUBLE_EQ(tp2.weight_grad.gemm_flops() * 2, one.weight_grad.gemm_flops()) << block.name;
    EXPECT_DOUBLE_EQ(m3.forward.gemm_flops(), 3 * one.forward.gemm_flops()) << block.name;
    EXPECT_DOUBLE_EQ(m3.forward.stream_bytes, 3 * one.forward.stream_bytes) << block.name;
    // The GEMM FLOPs never exceed the cost model's (which adds the elementwise FLOPs).
    const BlockCost c = block_cost(block);
    EXPECT_LE(one.forward.gemm_flops(), c.forward_flops) << block.name;
    EXPECT_LE(one.input_grad.gemm_flops(), c.input_grad_flops) << block.name;
    EXPECT_LE(one.weight_grad.gemm_flops(), c.weight_grad_flops) << block.name;
  }
  // The LM head: 2·T·D·V each pass.
  const BlockWork head = block_work(spec.blocks[3], DType::kF32, Recompute::kNone, 1, 1);
  EXPECT_DOUBLE_EQ(head.forward.gemm_flops(), 2.0 * 16 * 64 * 50);
}

TEST(BlockWork, RecomputationAddsTheRerunToInputGrad) {
  const ModelSpec spec = gpt(64, 4, 16, 50);
  const BlockSpec& block = spec.blocks[1];
  const BlockWork none = block_work(block, DType::kF32, Recompute::kNone, 1, 2);
  const BlockWork sel = block_work(block, DType::kF32, Recompute::kSelective, 1, 2);
  const BlockWork full = block_work(block, DType::kF32, Recompute::kFull, 1, 2);
  const double t = 16, d = 64, heads = 4, micro = 2;
  EXPECT_DOUBLE_EQ(sel.input_grad.gemm_flops() - none.input_grad.gemm_flops(), micro * 4 * (t * (t + 1) / 2) * d);
  EXPECT_DOUBLE_EQ(sel.input_grad.stream_bytes - none.input_grad.stream_bytes, micro * heads * t * (d / heads * 4 + 4));
  EXPECT_DOUBLE_EQ(full.input_grad.gemm_flops() - none.input_grad.gemm_flops(), none.forward.gemm_flops());
  EXPECT_DOUBLE_EQ(full.input_grad.stream_bytes - none.input_grad.stream_bytes, none.forward.stream_bytes);
  EXPECT_DOUBLE_EQ(full.forward.gemm_flops(), none.forward.gemm_flops());
}

}  // namespace
}  // namespace cleave::partition::block_work_test

namespace cleave::partition::block_work_test {
namespace {

// Llama block (grouped-query, K = Hkv·hd): q and o 2TD² each, k and v 2TDK each, gate, up and down 2TDF each,
// the attention core as GPT's; the cost model's FLOPs, parameters and tp sharding agree.
TEST(BlockWork, LlamaGemmFlopsMatchTheCostModelFormulas) {
  LlamaConfig c;
  c.vocab_size = 50;
  c.d_model = 64;
  c.n_layers = 1;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.seq_len = 16;
  const ModelSpec spec = make_llama_spec(c);
  EXPECT_EQ(spec.llama.ffn_hidden_size, 192);  // 2/3 of 256 = 170, rounded up to a multiple of 64
  const BlockSpec& block = spec.blocks[1];
  const double t = 16, d = 64, f = 192, k = 16;
  const double pairs = t * (t + 1) / 2;
  const BlockWork w = block_work(block, DType::kF32, Recompute::kNone, 1, 1);
  EXPECT_DOUBLE_EQ(w.forward.gemm_flops(), 4 * t * d * d + 4 * t * d * k + 6 * t * d * f + 4 * pairs * d);
  EXPECT_DOUBLE_EQ(w.input_grad.gemm_flops(), 4 * t * d * d + 4 * t * d * k + 6 * t * d * f + 10 * pairs * d);
  EXPECT_DOUBLE_EQ(w.weight_grad.gemm_flops(), 4 * t * d * d + 4 * t * d * k + 6 * t * d * f);
  const BlockCost cost = block_cost(block);
  EXPECT_LE(w.forward.gemm_flops(), cost.forward_flops);
  EXPECT_LE(w.input_grad.gemm_flops(), cost.input_grad_flops);
  EXPECT_DOUBLE_EQ(w.weight_grad.gemm_flops(), cost.weight_grad_flops - 2 * 3 * t * d);  // + two RMSNorm weights
  EXPECT_EQ(cost.param_count, static_cast<std::int64_t>(2 * d * d + 2 * d * k + 3 * d * f + 2 * d));
  const BlockWork tp2 = block_work(block, DType::kF32, Recompute::kNone, 2, 1);
  EXPECT_DOUBLE_EQ(tp2.forward.gemm_flops() * 2, w.forward.gemm_flops());
  EXPECT_DOUBLE_EQ(tp2.weight_grad.gemm_flops() * 2, w.weight_grad.gemm_flops());
  // Embedding without a position table: token ids only, no position parameters.
  EXPECT_EQ(block_cost(spec.blocks[0]).param_count, 50 * 64);
}

// Kernels per pass (PassWork::kernels, priced by the profile's kernel_launch_us) and the llama block's fused residual
// add: a GPT block launches LN, QKV, attention, proj, residual, LN, fc1, GELU, fc2, residual in F (10); in I the
// same with the attention's two (11); in W the four GEMMs, their four bias reductions and the two LN weight
// reductions (10). A llama block fuses the residual add before its second RMSNorm into one kernel
// (ops::add_rmsnorm_forward / _backward_input): F RMSNorm, q, k, v, rope, attention, o, add+RMSNorm, gate, up,
// SwiGLU, down, residual (13), I the same with the attention's two (14), W seven GEMMs and two norm weights (9).
TEST(BlockWork, KernelsPerPassAndTheFusedResidualNorm) {
  const BlockWork g = block_work(gpt(64, 4, 16, 50).blocks[1], DType::kBF16, Recompute::kNone, 1, 1);
  EXPECT_EQ(g.forward.kernels, 10);
  EXPECT_EQ(g.input_grad.kernels, 11);
  EXPECT_EQ(g.weight_grad.kernels, 10);
  LlamaConfig c;
  c.vocab_size = 50;
  c.d_model = 64;
  c.n_layers = 1;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.seq_len = 16;
  const ModelSpec spec = make_llama_spec(c);
  const BlockWork w = block_work(spec.blocks[1], DType::kBF16, Recompute::kNone, 1, 1);
  EXPECT_EQ(w.forward.kernels, 13);
  EXPECT_EQ(w.input_grad.kernels, 14);
  EXPECT_EQ(w.weight_grad.kernels, 9);
  // Streamed bytes, b = 2, n = T·D: RMSNorm 2n, rope 2·T(D + 2K), attention T·(dh·b + 4) per head, add+RMSNorm 4n
  // (not the unfused pair's 3n + 2n), SwiGLU 3TF, residual 3n; I: 3n, 2·T(D + 2K), 2·2·T·D, 4n (not 3n + 3n), 5TF, 3n.
  const double t = 16, d = 64, f = 192, k = 16, heads = 8, dh = 8, b = 2, n = t * d;
  EXPECT_DOUBLE_EQ(w.forward.stream_bytes,
                   b * (2 * n + 2 * t * (d + 2 * k) + 4 * n + 3 * t * f + 3 * n) + heads * t * (dh * b + 4));
  EXPECT_DOUBLE_EQ(w.input_grad.stream_bytes, b * (3 * n + 2 * t * (d + 2 * k) + 2 * t * d + 4 * n + 5 * t * f + 3 * n));
  EXPECT_DOUBLE_EQ(w.weight_grad.stream_bytes, b * (2 * n + 2 * n));
  // Recomputation reruns the forward's kernels inside I.
  const BlockWork full = block_work(spec.blocks[1], DType::kBF16, Recompute::kFull, 1, 1);
  EXPECT_EQ(full.input_grad.kernels, 14 + 13);
  const BlockWork selective = block_work(spec.blocks[1], DType::kBF16, Recompute::kSelective, 1, 1);
  EXPECT_EQ(selective.input_grad.kernels, 14 + 1);
}

// A sliding window (Mistral) prices only the keys a query sees, as the kernels skip blocks outside it: with
// w = 4 over T = 16 the first 4 rows see 1..4 keys and the other 12 see 4, P = 10 + 48 = 58 pairs; the cost
// model's attention terms shrink by the same pairs, and a window at least T is plain causal attention.
TEST(BlockWork, SlidingWindowCountsOnlyTheWindowsPairs) {
  LlamaConfig c;
  c.vocab_size = 50;
  c.d_model = 64;
  c.n_layers = 1;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.seq_len = 16;
  const ModelSpec causal = make_llama_spec(c);
  c.sliding_window = 4;
  const ModelSpec windowed = make_llama_spec(c);
  c.sliding_window = 16;
  const ModelSpec whole = make_llama_spec(c);
  ASSERT_EQ(windowed.blocks[1].attention_window, 4);
  const double t = 16, d = 64, heads = 8, causal_pairs = t * (t + 1) / 2, window_pairs = 58;
  const BlockWork a = block_work(causal.blocks[1], DType::kF32, Recompute::kNone, 1, 1);
  const BlockWork w = block_work(windowed.blocks[1], DType::kF32, Recompute::kNone, 1, 1);
  EXPECT_DOUBLE_EQ(a.forward.gemm_flops() - w.forward.gemm_flops(), 4 * (causal_pairs - window_pairs) * d);
  EXPECT_DOUBLE_EQ(a.input_grad.gemm_flops() - w.input_grad.gemm_flops(), 10 * (causal_pairs - window_pairs) * d);
  EXPECT_DOUBLE_EQ(a.weight_grad.gemm_flops(), w.weight_grad.gemm_flops());
  const BlockCost ca = block_cost(causal.blocks[1]), cw = block_cost(windowed.blocks[1]);
  EXPECT_DOUBLE_EQ(ca.forward_flops - cw.forward_flops, (4 * d + 5 * heads) * (causal_pairs - window_pairs));
  EXPECT_DOUBLE_EQ(ca.input_grad_flops - cw.input_grad_flops, (10 * d + 5 * heads) * (causal_pairs - window_pairs));
  EXPECT_GT(cw.forward_flops, 0);
  EXPECT_DOUBLE_EQ(block_cost(whole.blocks[1]).forward_flops, ca.forward_flops);
}

// The run's own kernels (simulate --cross-entropy float32, --hidden-dropout, --dense-embedding-grad): Megatron-LM's
// f32 cross-entropy over n = micro x T x V/tp logits moves n(b + 36) in F over 6 kernels and n(b + 12) in I over 3
// (f32 runs: no casts), in place of the fused kernel's 2n·b and 1 per pass; hidden dropout writes a byte mask per
// residual branch in F and runs its gradient in I (n(2b + 1), a kernel each), n = micro x T x D, the embedding's
// dropout a kernel of its own in F and in W; the rerun of full recomputation repeats the block's F part; the dense
// embedding gradient moves (V/tp + T)·D·(2b + 8) in W per micro-batch; blocks they do not touch get nothing.
TEST(BlockWork, RunKernelsTorchFloat32CrossEntropyIsCastLogSoftmaxAndNllLoss) {
  // torchtitan's loss: logits cast to f32, then F.cross_entropy (log_softmax + nll_loss), one kernel per op.
  const ModelSpec spec = gpt(64, 4, 16, 50);
  const double t = 16, v = 50;
  RunKernels run;
  run.cross_entropy = CrossEntropyKind::kTorchFloat32;
  EXPECT_EQ(cross_entropy_kind_name(run.cross_entropy), "torch_float32");
  EXPECT_EQ(cross_entropy_kind_from("torch_float32"), CrossEntropyKind::kTorchFloat32);
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    const double b = dtype == DType::kBF16 ? 2 : 4;
    const bool cast = dtype == DType::kBF16;
    for (const std::int64_t micro : {1, 3}) {
      const double n = static_cast<double>(micro) * t * v;
      const BlockWork base = block_work(spec.blocks[4], dtype, Recompute::kNone, 1, micro);
      const BlockWork extra = run_kernels_work(spec.blocks[4], dtype, run, Recompute::kNone, 1, micro);
      // F: cast n(b + 4), log_softmax 8n; I: zero-fill 4n, log_softmax backward 12n, cast back n(4 + b).
      EXPECT_DOUBLE_EQ(base.forward.stream_bytes + extra.forward.stream_bytes, cast ? n * (b + 12) : 8 * n);
      EXPECT_DOUBLE_EQ(base.input_grad.stream_bytes + extra.input_grad.stream_bytes, cast ? n * (b + 20) : 16 * n);
      EXPECT_DOUBLE_EQ(base.forward.kernels + extra.forward.kernels, cast ? 3 : 2);
      EXPECT_DOUBLE_EQ(base.input_grad.kernels + extra.input_grad.kernels, cast ? 4 : 3);
    }
  }
  // Fewer bytes than Megatron-LM's six-op loss, more than the fused one.
  RunKernels megatron;
  megatron.cross_entropy = CrossEntropyKind::kFloat32;
  const double torch_f = run_kernels_work(spec.blocks[4], DType::kBF16, run, Recompute::kNone, 1, 1).forward.stream_bytes;
  EXPECT_GT(torch_f, 0);
  EXPECT_LT(torch_f, run_kernels_work(spec.blocks[4], DType::kBF16, megatron, Recompute::kNone, 1, 1).forward.stream_bytes);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(run_kernels_work(spec.blocks[i], DType::kBF16, run, Recompute::kFull, 1, 2).forward.stream_bytes, 0.0) << i;
  }
}

TEST(BlockWork, RunKernelsFloat32CrossEntropyAndHiddenDropout) {
  const ModelSpec spec = gpt(64, 4, 16, 50);  // embed, block, layernorm, head, loss
  const double t = 16, d = 64, v = 50;
  ASSERT_EQ(spec.blocks[4].kind, BlockKind::kSoftmaxCrossEntropy);
  RunKernels run;
  run.cross_entropy = CrossEntropyKind::kFloat32;
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    const double b = dtype == DType::kBF16 ? 2 : 4;
    for (const int tp : {1, 2}) {
      for (const std::int64_t micro : {1, 3}) {
        const double n = static_cast<double>(micro) * t * std::floor(v / tp);
        const BlockWork base = block_work(spec.blocks[4], dtype, Recompute::kNone, tp, micro);
        const BlockWork extra = run_kernels_work(spec.blocks[4], dtype, run, Recompute::kNone, tp, micro);
        // An f32 run casts nothing: 32n over 5 kernels in F, 8n over 2 in I.
        const bool cast = dtype == DType::kBF16;
        EXPECT_DOUBLE_EQ(base.forward.stream_bytes + extra.forward.stream_bytes, cast ? n * (b + 36) : 32 * n)
            << tp << " " << micro;
        EXPECT_DOUBLE_EQ(base.input_grad.stream_bytes + extra.input_grad.stream_bytes, cast ? n * (b + 12) : 8 * n)
            << tp << " " << micro;
        EXPECT_DOUBLE_EQ(base.forward.kernels + extra.forward.kernels, cast ? 6 : 5);
        EXPECT_DOUBLE_EQ(base.input_grad.kernels + extra.input_grad.kernels, cast ? 3 : 2);
        EXPECT_TRUE(extra.forward.gemms.empty() && extra.input_grad.gemms.empty() && extra.weight_grad.gemms.empty());
      }
    }
  }
  // Only the loss block: the cross-entropy kind alone adds nothing elsewhere.
  for (std::size_t i = 0; i < 4; ++i) {
    const BlockWork none = run_kernels_work(spec.blocks[i], DType::kBF16, run, Recompute::kFull, 1, 2);
    EXPECT_EQ(none.forward.stream_bytes + none.input_grad.stream_bytes + none.weight_grad.stream_bytes, 0.0) << i;
  }
  RunKernels dropout;
  dropout.hidden_dropout = true;
  const double b = 2, n = 3 * t * d;
  const BlockWork block = run_kernels_work(spec.blocks[1], DType::kBF16, dropout, Recompute::kNone, 2, 3);
  EXPECT_DOUBLE_EQ(block.forward.stream_bytes, 2 * n);
  EXPECT_DOUBLE_EQ(block.forward.kernels, 0);  // fused into the bias-dropout-adds block_work counts
  EXPECT_DOUBLE_EQ(block.input_grad.stream_bytes, 2 * n * (2 * b + 1));
  EXPECT_DOUBLE_EQ(block.input_grad.kernels, 2);
  EXPECT_DOUBLE_EQ(block.weight_grad.stream_bytes, 0);
  const BlockWork full = run_kernels_work(spec.blocks[1], DType::kBF16, dropout, Recompute::kFull, 2, 3);
  EXPECT_DOUBLE_EQ(full.input_grad.stream_bytes, 2 * n * (2 * b + 1) + 2 * n);
  const BlockWork selective = run_kernels_work(spec.blocks[1], DType::kBF16, dropout, Recompute::kSelective, 2, 3);
  EXPECT_DOUBLE_EQ(selective.input_grad.stream_bytes, 2 * n * (2 * b + 1));  // the attention core has no hidden dropout
  const BlockWork embed = run_kernels_work(spec.blocks[0], DType::kBF16, dropout, Recompute::kNone, 1, 3);
  EXPECT_DOUBLE_EQ(embed.forward.stream_bytes, n * (2 * b + 1));
  EXPECT_DOUBLE_EQ(embed.weight_grad.stream_bytes, n * (2 * b + 1));
  EXPECT_DOUBLE_EQ(embed.forward.kernels + embed.weight_grad.kernels, 2);
  for (std::size_t i : {2u, 3u, 4u}) {
    const BlockWork none = run_kernels_work(spec.blocks[i], DType::kBF16, dropout, Recompute::kNone, 1, 3);
    EXPECT_EQ(none.forward.stream_bytes + none.input_grad.stream_bytes + none.input_grad.kernels, 0.0) << i;
  }
  // The dense embedding gradient: (V/tp + T)·D rows zero-filled in b bytes and added into an f32 main gradient, per
  // micro-batch (not scaled by it).
  RunKernels dense;
  dense.dense_embedding_grad = true;
  for (const int tp : {1, 2}) {
    const BlockWork e1 = run_kernels_work(spec.blocks[0], DType::kBF16, dense, Recompute::kNone, tp, 1);
    const BlockWork e3 = run_kernels_work(spec.blocks[0], DType::kBF16, dense, Recompute::kNone, tp, 3);
    EXPECT_DOUBLE_EQ(e1.weight_grad.stream_bytes, (std::floor(v / tp) + t) * d * (2 * b + 8)) << tp;
    EXPECT_DOUBLE_EQ(e3.weight_grad.stream_bytes, e1.weight_grad.stream_bytes) << tp;
    EXPECT_DOUBLE_EQ(e1.weight_grad.kernels, 4);
    EXPECT_DOUBLE_EQ(e1.forward.stream_bytes + e1.input_grad.stream_bytes, 0);
  }
  EXPECT_TRUE(dense.any());
  EXPECT_FALSE(RunKernels{}.any());
  EXPECT_EQ(cross_entropy_kind_from("float32"), CrossEntropyKind::kFloat32);
  EXPECT_EQ(cross_entropy_kind_from("fused"), CrossEntropyKind::kFused);
  EXPECT_FALSE(cross_entropy_kind_from("f32").has_value());
}

// Sequence parallelism (tp > 1): a block's norms and residual adds, the final norm and the hidden dropouts run on the
// rank's T/tp tokens; the GEMMs, the attention core and the tp-sharded GELU / SwiGLU do not change; at tp 1 the flag
// changes nothing.
TEST(BlockWork, SequenceParallelShardsTheResidualStreamsOps) {
  const ModelSpec spec = gpt(64, 4, 16, 50);
  const double t = 16, d = 64, b = 2;
  for (const int tp : {2, 4}) {
    const BlockWork full = block_work(spec.blocks[1], DType::kBF16, Recompute::kNone, tp, 1);
    const BlockWork sp = block_work(spec.blocks[1], DType::kBF16, Recompute::kNone, tp, 1, true);
    const double shed = 1.0 - 1.0 / tp;
    // Two LayerNorms (F 2n·b, I 3n·b, W 2n·b each) and two residual adds (F and I 3n·b each), n = T·D.
    EXPECT_DOUBLE_EQ(full.forward.stream_bytes - sp.forward.stream_bytes, shed * (4 + 6) * t * d * b) << tp;
    EXPECT_DOUBLE_EQ(full.input_grad.stream_bytes - sp.input_grad.stream_bytes, shed * (6 + 6) * t * d * b) << tp;
    EXPECT_DOUBLE_EQ(full.weight_grad.stream_bytes - sp.weight_grad.stream_bytes, shed * 4 * t * d * b) << tp;
    EXPECT_DOUBLE_EQ(full.forward.gemm_flops(), sp.forward.gemm_flops());
    EXPECT_DOUBLE_EQ(full.forward.kernels, sp.forward.kernels);
    const BlockWork norm = block_work(spec.blocks[2], DType::kBF16, Recompute::kNone, tp, 1);
    const BlockWork norm_sp = block_work(spec.blocks[2], DType::kBF16, Recompute::kNone, tp, 1, true);
    EXPECT_DOUBLE_EQ(norm_sp.forward.stream_bytes * tp, norm.forward.stream_bytes) << tp;
    RunKernels dropout;
    dropout.hidden_dropout = true;
    const BlockWork mask = run_kernels_work(spec.blocks[1], DType::kBF16, dropout, Recompute::kNone, tp, 1);
    const BlockWork mask_sp = run_kernels_work(spec.blocks[1], DType::kBF16, dropout, Recompute::kNone, tp, 1, true);
    EXPECT_DOUBLE_EQ(mask_sp.input_grad.stream_bytes * tp, mask.input_grad.stream_bytes) << tp;
  }
  const BlockWork one = block_work(spec.blocks[1], DType::kBF16, Recompute::kNone, 1, 1);
  const BlockWork one_sp = block_work(spec.blocks[1], DType::kBF16, Recompute::kNone, 1, 1, true);
  EXPECT_DOUBLE_EQ(one.forward.stream_bytes, one_sp.forward.stream_bytes);
}

}  // namespace
}  // namespace cleave::partition::block_work_test
