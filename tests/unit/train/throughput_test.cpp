// Model FLOPs, achieved FLOP/s per rank and MFU (engine/train/throughput.hpp): the model FLOPs of a GPT sample
// against the closed form 6N + 12·L·d·T per token that Megatron and torchtitan use (the cost model adds only
// elementwise work, a few percent at these sizes), recomputation not counted, and the per-rank rate and MFU
// from a step time, with no MFU without a peak.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/train/throughput.hpp"
#include "partition/cost_model.hpp"
#include "partition/model_spec.hpp"

namespace cleave::train::throughput_test {
namespace {

TEST(Throughput, GptModelFlopsMatchTheClosedForm) {
  partition::GptConfig c;
  c.vocab_size = 512;
  c.d_model = 128;
  c.n_layers = 3;
  c.n_heads = 4;
  c.seq_len = 64;
  c.d_ff = 512;
  const partition::ModelSpec spec = partition::make_gpt_spec(c);
  const double T = 64, D = 128, F = 512, V = 512, L = 3;
  // Per token: 6 x (each block's GEMM weights 4D² + 2DF, and the head's D·V) + 12·L·D·T (attention, every
  // score counted as Megatron and torchtitan count it, although the kernels compute only the causal half).
  const double closed_form = T * (6.0 * (L * (4 * D * D + 2 * D * F) + D * V) + 12.0 * L * D * T);
  const double model = model_flops_per_sample(spec);
  EXPECT_GE(model, closed_form);                 // the elementwise work comes on top, never below
  EXPECT_LT(model, closed_form * 1.05) << model / closed_form;  // and is a few percent here
}

// MFU's model FLOPs follow the peers' convention, not the kernels' work: a sliding window, which cuts what the
// cost model prices here, leaves attention's products unchanged.
TEST(Throughput, ModelFlopsCountEveryScoreWhateverTheWindow) {
  partition::LlamaConfig c;
  c.vocab_size = 256;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.seq_len = 128;
  c.max_seq_len = 128;
  c.ffn_hidden_size = 128;
  const partition::ModelSpec full = partition::make_llama_spec(c);
  c.sliding_window = 16;
  const partition::ModelSpec windowed = partition::make_llama_spec(c);
  // The products count every score either way; only the softmax's elementwise work (5 FLOPs per computed score
  // each way, per head) follows the window: 2 blocks x 4 heads x 10 x (8256 causal - 1928 windowed pairs).
  const double softmax_gap = 2 * 4 * 10.0 * (128.0 * 129 / 2 - (16.0 * 17 / 2 + 112.0 * 16));
  EXPECT_DOUBLE_EQ(model_flops_per_sample(full) - model_flops_per_sample(windowed), softmax_gap);
  double priced_full = 0, priced_windowed = 0;
  for (const auto& b : partition::model_costs(full)) priced_full += b.total_flops();
  for (const auto& b : partition::model_costs(windowed)) priced_windowed += b.total_flops();
  EXPECT_LT(priced_windowed, priced_full);  // the cost model prices the window's pairs only
  EXPECT_GT(model_flops_per_sample(full), priced_full);  // every score, not the causal half
}

TEST(Throughput, PerRankRateAndMfu) {
  partition::GptConfig c;
  const partition::ModelSpec spec = partition::make_gpt_spec(c);
  const double per_sample = model_flops_per_sample(spec);
  ASSERT_GT(per_sample, 0);
  const Throughput none = make_throughput(spec, 8, 4, {});
  EXPECT_DOUBLE_EQ(none.model_flops_per_step, 8 * per_sample);
  // 8 samples in 50 ms over 4 ranks.
  EXPECT_DOUBLE_EQ(none.flops_per_rank(50.0), 8 * per_sample / 0.05 / 4);
  EXPECT_TRUE(std::isnan(none.mfu(50.0)));  // no peak: no MFU
  EXPECT_TRUE(std::isnan(none.flops_per_rank(0.0)));
  const double peak = none.flops_per_rank(50.0) * 4;  // a peak four times the achieved rate
  const Throughput with_peak = make_throughput(spec, 8, 4, {peak, "test peak"});
  EXPECT_DOUBLE_EQ(with_peak.mfu(50.0), 0.25);
  EXPECT_DOUBLE_EQ(with_peak.mfu(100.0), 0.125);
}

}  // namespace
}  // namespace cleave::train::throughput_test
