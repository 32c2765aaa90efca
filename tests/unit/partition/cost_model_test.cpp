// Cost model: hand-computed FLOPs, parameter and activation bytes for a tiny gpt, an mlp and a cnn.
//
// Tiny gpt: V = 11, D = 8, T = 4, H = 2, F = 32 (4·D), one layer. Every expected number below is worked
// out by hand from the formulas in cost_model.hpp (not by calling the code under test).
#include <gtest/gtest.h>

#include "engine/core/error.hpp"
#include "partition/cost_model.hpp"
#include "partition/families/llama.hpp"

namespace cleave::partition::cost_model_test {
namespace {

ModelSpec tiny_gpt(bool tied = true) {
  GptConfig c;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.seq_len = 4;
  c.tie_embeddings = tied;
  return make_gpt_spec(c);
}

TEST(CostModel, TinyGptTransformerBlock) {
  const ModelSpec spec = tiny_gpt();
  const BlockCost c = block_cost(spec.blocks[1]);
  // GEMMs: 8TD² = 2048, 4TDF = 4096, attention 4PD = 320 over the P = T(T+1)/2 = 10 causal query/key pairs
  // (the kernels skip masked blocks). Elementwise: LN 2·8TD = 512, bias adds 3TD + TD + TF + TD = 288,
  // residuals 2TD = 64, GELU 8TF = 1024, softmax 5HP = 100.
  EXPECT_DOUBLE_EQ(c.forward_flops, 2048 + 4096 + 320 + 512 + 288 + 64 + 1024 + 100);
  // 6144 weight-shaped GEMMs + attention 10PD = 800 (Q·Kᵀ recomputed) + softmax 100 + LN 2·10TD = 640 +
  // residuals 64 + GELU 12TF = 1536.
  EXPECT_DOUBLE_EQ(c.input_grad_flops, 6144 + 800 + 100 + 640 + 64 + 1536);
  // 6144 + bias grads 288 + LN weights 2·5TD = 320.
  EXPECT_DOUBLE_EQ(c.weight_grad_flops, 6144 + 288 + 320);
  EXPECT_DOUBLE_EQ(c.total_flops(), 8452 + 9284 + 6752);
  // 4D² + 2DF + 9D + F = 256 + 512 + 72 + 32.
  EXPECT_EQ(c.param_count, 872);
  EXPECT_EQ(c.param_bytes, 872 * 4);
  // (8TD + 2TF)·4 + HT·4 (the attention's lse, f32; no HT² probabilities) + 4T·4 = (256 + 256)·4 + 32 + 64.
  EXPECT_EQ(c.activation_bytes, 2144);
  EXPECT_EQ(c.output_bytes, 4 * 8 * 4);

  const BlockCost half = block_cost(spec.blocks[1], DType::kBF16);
  EXPECT_EQ(half.activation_bytes, 512 * 2 + 32 + 64);  // statistics stay f32
  EXPECT_EQ(half.param_bytes, 872 * 2);
  EXPECT_DOUBLE_EQ(half.forward_flops, c.forward_flops);
}

TEST(CostModel, TinyGptOtherBlocks) {
  const ModelSpec spec = tiny_gpt();
  const auto costs = model_costs(spec);
  ASSERT_EQ(costs.size(), 5u);

  const BlockCost& embed = costs[0];
  EXPECT_DOUBLE_EQ(embed.forward_flops, 32);  // position add T·D
  EXPECT_DOUBLE_EQ(embed.input_grad_flops, 0);
  EXPECT_DOUBLE_EQ(embed.weight_grad_flops, 64);
  EXPECT_EQ(embed.param_count, 11 * 8 + 4 * 8);
  EXPECT_EQ(embed.activation_bytes, 16);  // the ids
  EXPECT_EQ(embed.output_bytes, 128);

  const BlockCost& norm = costs[2];
  EXPECT_DOUBLE_EQ(norm.forward_flops, 256);
  EXPECT_DOUBLE_EQ(norm.input_grad_flops, 320);
  EXPECT_DOUBLE_EQ(norm.weight_grad_flops, 160);
  EXPECT_EQ(norm.param_count, 16);
  EXPECT_EQ(norm.activation_bytes, 128 + 32);

  const BlockCost& head = costs[3];
  EXPECT_DOUBLE_EQ(head.forward_flops, 704);  // 2·T·D·V
  EXPECT_DOUBLE_EQ(head.input_grad_flops, 704);
  EXPECT_DOUBLE_EQ(head.weight_grad_flops, 704);
  EXPECT_EQ(head.param_count, 88);
  EXPECT_EQ(head.activation_bytes, 128);
  EXPECT_EQ(head.output_bytes, 4 * 11 * 4);

  const BlockCost& loss = costs[4];
  EXPECT_DOUBLE_EQ(loss.forward_flops, 176);
  EXPECT_DOUBLE_EQ(loss.input_grad_flops, 132);
  EXPECT_DOUBLE_EQ(loss.weight_grad_flops, 0);
  EXPECT_EQ(loss.param_count, 0);
  EXPECT_EQ(loss.activation_bytes, 176 + 16 + 16);  // logits, log-sum-exp, targets
  EXPECT_EQ(loss.output_bytes, 0);
}

TEST(CostModel, TiedTableCountedOnceInARange) {
  const ModelSpec tied = tiny_gpt(true);
  EXPECT_EQ(unique_param_count(tied, 0, 5), 120 + 872 + 16);
  EXPECT_EQ(unique_param_count(tied, 3, 5), 88);  // the head on its own stage holds a copy
  EXPECT_EQ(unique_param_count(tied, 0, 1), 120);
  const ModelSpec untied = tiny_gpt(false);
  EXPECT_EQ(unique_param_count(untied, 0, 5), 120 + 872 + 16 + 88);
  EXPECT_THROW(unique_param_count(tied, 2, 2), Error);
  EXPECT_THROW(unique_param_count(tied, 0, 6), Error);
}

TEST(CostModel, MlpAndCnn) {
  MlpConfig m;
  m.in_features = 5;
  m.hidden = {7};
  m.num_classes = 3;
  const auto mc = model_costs(make_mlp_spec(m));
  ASSERT_EQ(mc.size(), 4u);
  EXPECT_DOUBLE_EQ(mc[0].forward_flops, 2 * 5 * 7 + 7);
  EXPECT_DOUBLE_EQ(mc[0].input_grad_flops, 70);
  EXPECT_DOUBLE_EQ(mc[0].weight_grad_flops, 77);
  EXPECT_EQ(mc[0].param_count, 42);
  EXPECT_EQ(mc[0].activation_bytes, 20);
  EXPECT_EQ(mc[1].activation_bytes, 28);  // relu keeps its input
  EXPECT_DOUBLE_EQ(mc[1].forward_flops, 7);
  EXPECT_EQ(mc[2].param_count, 24);
  EXPECT_EQ(mc[3].activation_bytes, 12 + 4 + 4);

  CnnConfig c;
  c.in_channels = 2;
  c.height = 6;
  c.width = 4;
  c.channels = {3};
  c.kernel = 3;
  c.pool = 2;
  c.num_classes = 5;
  const auto cc = model_costs(make_cnn_spec(c));
  ASSERT_EQ(cc.size(), 6u);
  // conv: 2·C'·H·W·C·k² = 2·3·24·2·9 = 2592, bias C'HW = 72.
  EXPECT_DOUBLE_EQ(cc[0].forward_flops, 2592 + 72);
  EXPECT_DOUBLE_EQ(cc[0].input_grad_flops, 2592);
  EXPECT_DOUBLE_EQ(cc[0].weight_grad_flops, 2592 + 72);
  EXPECT_EQ(cc[0].param_count, 3 * 2 * 9 + 3);
  EXPECT_EQ(cc[0].activation_bytes, 2 * 24 * 4);
  EXPECT_EQ(cc[0].output_bytes, 3 * 24 * 4);
  // maxpool: 3·3·2 outputs, 4 comparisons each; argmax i32.
  EXPECT_DOUBLE_EQ(cc[2].forward_flops, 72);
  EXPECT_DOUBLE_EQ(cc[2].input_grad_flops, 18);
  EXPECT_EQ(cc[2].activation_bytes, 72);
  EXPECT_EQ(cc[3].activation_bytes, 0);  // flatten
  EXPECT_DOUBLE_EQ(cc[3].forward_flops, 0);
  EXPECT_EQ(cc[4].param_count, 18 * 5 + 5);
}

}  // namespace
}  // namespace cleave::partition::cost_model_test

namespace cleave::partition::cost_model_test {
namespace {

// Sequence parallelism, tiny gpt at tp 2 (T = 4, D = 8, F = 32, H = 2, f32): hand-computed per sample.
TEST(CostModel, SequenceParallelDividesTheWholeTensorsByTp) {
  const ModelSpec spec = tiny_gpt();
  const BlockCost plain = block_cost(spec.blocks[1], DType::kF32, Recompute::kNone, 2);
  const BlockCost sp = block_cost(spec.blocks[1], DType::kF32, Recompute::kNone, 2, true);
  // Plain tp: (4TD + (3TD + TD + 2TF)/2)·4 + (H/2)T·4 (the attention's lse) + 4T·4 = 1280 + 16 + 64 = 1360.
  EXPECT_EQ(plain.activation_bytes, 1360);
  // SP: (8TD + 2TF)/2·4 + (H/2)T·4 + 4(T/2)·4 = 1024 + 16 + 32 = 1072.
  EXPECT_EQ(sp.activation_bytes, 1072);
  // I to W: (2TD + (12TD + 2TF)/2)·4 + 4(T/2)·4 = (64 + 320)·4 + 32 = 1568.
  EXPECT_EQ(sp.weight_stash_bytes, 1568);
  EXPECT_EQ(sp.output_bytes, 2 * 8 * 4);  // [T/2, D]
  EXPECT_EQ(sp.forward_flops, plain.forward_flops);
  EXPECT_EQ(block_cost(spec.blocks[1], DType::kF32, Recompute::kFull, 2, true).activation_bytes, 2 * 8 * 4);
  // tp 1: the flag changes nothing.
  EXPECT_EQ(block_cost(spec.blocks[1], DType::kF32, Recompute::kNone, 1, true).activation_bytes,
            block_cost(spec.blocks[1]).activation_bytes);
  // Final norm: [T/2, D] input + 2·(T/2) statistics.
  EXPECT_EQ(block_cost(spec.blocks[2], DType::kF32, Recompute::kNone, 2, true).activation_bytes, 2 * 8 * 4 + 2 * 2 * 4);
}

TEST(CostModel, SequenceParallelCollectivesMoveTheSameBytes) {
  const ModelSpec spec = tiny_gpt();
  const std::int64_t stream = 4 * 8 * 4;  // [T, D] f32
  const TpBlockComm plain = tp_block_comm(spec.blocks[1], DType::kF32, 2, false);
  const TpBlockComm sp = tp_block_comm(spec.blocks[1], DType::kF32, 2, true);
  ASSERT_EQ(plain.forward.size(), 2u);
  ASSERT_EQ(sp.forward.size(), 4u);
  ASSERT_EQ(sp.input_grad.size(), 4u);
  ASSERT_EQ(sp.weight_grad.size(), 2u);
  EXPECT_TRUE(plain.weight_grad.empty());
  // Ring bytes per rank: all-reduce 2 (tp-1)/tp, reduce-scatter and all-gather (tp-1)/tp of the tensor.
  auto ring = [](const std::vector<TpCollective>& list) {
    double bytes = 0;
    for (const auto& c : list) bytes += (c.op == Collective::kAllReduce ? 2.0 : 1.0) * 0.5 * c.bytes;
    return bytes;
  };
  EXPECT_EQ(ring(sp.forward), ring(plain.forward));
  EXPECT_EQ(ring(sp.input_grad), ring(plain.input_grad));
  EXPECT_EQ(ring(sp.weight_grad), 2 * 0.5 * stream);  // the re-gathered column-parallel inputs
  for (const auto& c : sp.forward) EXPECT_EQ(c.bytes, stream);
  EXPECT_TRUE(tp_block_comm(spec.blocks[1], DType::kF32, 1, true).forward.empty());
  EXPECT_EQ(tp_block_comm(spec.blocks[0], DType::kF32, 2, true).forward[0].op, Collective::kReduceScatter);
}

// Llama's embedding has no learned positions (seq_len 0): its tokens come from the ids' shape [T]. T = 8, D = 16,
// f32, tp 2: the forward all-reduce / reduce-scatter and the input gradient's all-gather move [T, D]; under
// sequence parallelism the weight stash is the ids (i32), the gathered dy [T, D] and the dy shard [T/2, D]
// (800 B, as mpi_llama_stash_test_np2 measures; it was costed 352 B when the tokens came from seq_len).
TEST(CostModel, LlamaEmbeddingCountsItsTokensFromTheIds) {
  LlamaConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_heads = 4;
  c.seq_len = 8;
  const ModelSpec spec = make_llama_spec(llama_defaults(c));
  const BlockSpec& embed = spec.blocks.front();
  ASSERT_EQ(embed.kind, BlockKind::kEmbedding);
  ASSERT_EQ(embed.seq_len, 0);
  const std::int64_t stream = 8 * 16 * 4;
  const TpBlockComm plain = tp_block_comm(embed, DType::kF32, 2, false);
  const TpBlockComm sp = tp_block_comm(embed, DType::kF32, 2, true);
  ASSERT_EQ(plain.forward.size(), 1u);
  EXPECT_EQ(plain.forward[0].bytes, stream);
  ASSERT_EQ(sp.forward.size(), 1u);
  EXPECT_EQ(sp.forward[0].bytes, stream);
  ASSERT_EQ(sp.input_grad.size(), 1u);
  EXPECT_EQ(sp.input_grad[0].bytes, stream);
  const BlockCost cost = block_cost(embed, DType::kF32, Recompute::kNone, 2, true);
  EXPECT_EQ(cost.weight_stash_bytes, 8 * 4 + stream + stream / 2);
  EXPECT_EQ(cost.output_bytes, stream / 2);
}

}  // namespace
}  // namespace cleave::partition::cost_model_test
