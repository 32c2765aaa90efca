// Model FLOPs, achieved FLOP/s per rank and MFU (engine/train/throughput.hpp): the model FLOPs of a GPT sample
// against the closed form 6N + 12·L·d·T per token that Megatron and torchtitan use (the cost model adds only
// elementwise work, a few percent at these sizes), recomputation not counted, and the per-rank rate and MFU
// from a step time, with no MFU without a peak.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/train/throughput.hpp"
#include "partition/model_spec.hpp"

namespace cleave::train {
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
  // Per token: 6 x (each block's GEMM weights 4D² + 2DF, and the head's D·V), plus attention's 12·L·D per
  // query/key pair over the T(T+1)/2 causal pairs the kernels compute (Megatron's 12·L·D·T per token counts
  // all T² scores).
  const double closed_form = T * 6.0 * (L * (4 * D * D + 2 * D * F) + D * V) + 12.0 * L * D * T * (T + 1) / 2;
  const double model = model_flops_per_sample(spec);
  EXPECT_GE(model, closed_form);                 // the elementwise work comes on top, never below
  EXPECT_LT(model, closed_form * 1.05) << model / closed_form;  // and is a few percent here
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
}  // namespace cleave::train
