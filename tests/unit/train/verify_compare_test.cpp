// cleave verify's parameter comparison (engine/train/verify_compare.hpp): Adam's per-step bound is the largest
// |m_hat / sqrt(v_hat)| any gradient sequence reaches (met by the Cauchy-Schwarz worst case, never exceeded by
// random ones); a null-gradient slice leaves the normalised comparison and is held to the drift bound; a wrong
// gradient anywhere else in the same tensor (a cp reduction missed on the query bias) still fails; the slices are
// gpt's key biases under AdamW and nothing under SGD or for a rotary family.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/rng.hpp"
#include "engine/train/verify_compare.hpp"

namespace cleave::train::verify_compare_test {
namespace {

// Bias-corrected Adam (eps 0) on `g`: |m_hat / sqrt(v_hat)| after the last gradient.
double adam_ratio(const std::vector<double>& g, double beta1, double beta2) {
  double m = 0, v = 0;
  for (double x : g) {
    m = beta1 * m + (1 - beta1) * x;
    v = beta2 * v + (1 - beta2) * x * x;
  }
  const double t = static_cast<double>(g.size());
  return std::abs(m / (1 - std::pow(beta1, t))) / std::sqrt(v / (1 - std::pow(beta2, t)));
}

TEST(VerifyCompare, AdamStepBoundIsTightAndHolds) {
  const double b1 = 0.9, b2 = 0.999;
  EXPECT_DOUBLE_EQ(adamw_step_bound(b1, b2, 1), 1.0);
  for (std::int64_t t : {2, 3, 10, 200}) {
    // Equality case of Cauchy-Schwarz: g_k proportional to (beta1 / beta2)^(t - k).
    std::vector<double> worst;
    for (std::int64_t k = 1; k <= t; ++k) worst.push_back(std::pow(b1 / b2, static_cast<double>(t - k)));
    EXPECT_NEAR(adam_ratio(worst, b1, b2), adamw_step_bound(b1, b2, t), 1e-9 * adamw_step_bound(b1, b2, t)) << t;
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      std::vector<double> g;
      for (std::int64_t k = 0; k < t; ++k) g.push_back(rng::normal(seed, 5, static_cast<std::uint64_t>(k)));
      EXPECT_LE(adam_ratio(g, b1, b2), adamw_step_bound(b1, b2, t)) << t << " " << seed;
    }
  }
}

TEST(VerifyCompare, DriftBoundSumsTheSchedule) {
  config::OptimizerConfig adamw;
  adamw.lr = 0.01;
  adamw.warmup_steps = 0;
  adamw.schedule = config::LrScheduleType::kConstant;
  EXPECT_DOUBLE_EQ(adamw_drift_bound(adamw, 1), 2 * 0.01);
  const double b2 = adamw_step_bound(0.9, 0.999, 2), b3 = adamw_step_bound(0.9, 0.999, 3);
  EXPECT_NEAR(adamw_drift_bound(adamw, 3), 2 * 0.01 * (1 + b2 + b3), 1e-15);
  adamw.warmup_steps = 2;  // lr 0.005, 0.01, 0.01
  EXPECT_NEAR(adamw_drift_bound(adamw, 3), 2 * (0.005 + 0.01 * b2 + 0.01 * b3), 1e-15);
}

// A gpt qkv bias of d = 4 after a few AdamW steps of lr 1e-3: q and v moved by lr-sized steps, the key slice
// [4, 8) by rounding noise that AdamW turned into steps of a fraction of lr, differently in the two runs.
struct QkvBias {
  ParameterMap reference, layout;
  std::vector<partition::NullGradient> key = {{"blocks.0.attn.qkv.bias", 4, 8, "key bias"}};
};

QkvBias qkv_bias() {
  QkvBias b;
  std::vector<float> ref(12), lay(12);
  for (int i = 0; i < 12; ++i) {
    ref[i] = static_cast<float>(3e-3 * rng::normal(1, 2, static_cast<std::uint64_t>(i)));
    lay[i] = ref[i] * (1.0f + 1e-6f);  // a correct layout: rounding-level agreement
  }
  for (int i = 4; i < 8; ++i) lay[i] = ref[i] + 2e-3f * static_cast<float>(i % 2 == 0 ? 1 : -1);
  b.reference = {{"blocks.0.attn.qkv.bias", ref}, {"embed.token", {0.5f, -0.25f}}};
  b.layout = {{"blocks.0.attn.qkv.bias", lay}, {"embed.token", {0.5f, -0.25f}}};
  return b;
}

TEST(VerifyCompare, NullSliceIsHeldToTheBoundAndTheRestStillCompared) {
  const QkvBias b = qkv_bias();
  // Every element compared (SGD's way): the amplified noise dominates the tensor.
  const ParamComparison all = compare_parameters(b.layout, b.reference, {}, 0);
  EXPECT_GT(all.max_param_difference, 0.1);
  EXPECT_TRUE(all.null_slices.empty());
  // The key slice out: q and v agree to rounding; the slice is within a bound of 6e-3 and beyond one of 1e-3.
  const ParamComparison held = compare_parameters(b.layout, b.reference, b.key, 6e-3);
  EXPECT_TRUE(held.same_names);
  EXPECT_LT(held.max_param_difference, 1e-5);
  EXPECT_GT(held.max_param_difference, 0);  // q and v are still compared
  ASSERT_EQ(held.null_slices.size(), 1u);
  EXPECT_NEAR(held.null_slices[0].max_abs, 2e-3, 1e-6);
  EXPECT_TRUE(held.null_slices[0].within());
  EXPECT_FALSE(compare_parameters(b.layout, b.reference, b.key, 1e-3).null_slices[0].within());
}

TEST(VerifyCompare, WrongGradientOutsideTheSliceStillFails) {
  QkvBias b = qkv_bias();
  // A query-bias element off by half a step (a cp partial sum dropped from its gradient): far past 1e-3.
  b.layout["blocks.0.attn.qkv.bias"][1] += 1.5e-3f;
  EXPECT_GT(compare_parameters(b.layout, b.reference, b.key, 6e-3).max_param_difference, 0.1);
  // A non-finite key bias is beyond any bound; a non-finite weight fails the comparison.
  QkvBias nan = qkv_bias();
  nan.layout["blocks.0.attn.qkv.bias"][5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(compare_parameters(nan.layout, nan.reference, nan.key, 6e-3).null_slices[0].within());
  nan.layout["embed.token"][0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(compare_parameters(nan.layout, nan.reference, nan.key, 6e-3).max_param_difference <= 1e-3);
}

TEST(VerifyCompare, NullSlicesAreGptKeyBiasesUnderAdamwOnly) {
  config::RunConfig config;
  config.model.type = partition::ModelType::kGpt;
  config.model.gpt.d_model = 32;
  config.model.gpt.n_layers = 3;
  const std::vector<partition::NullGradient> slices = verify_null_slices(config);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[2].param, "blocks.2.attn.qkv.bias");
  EXPECT_EQ(slices[2].begin, 32);
  EXPECT_EQ(slices[2].end, 64);
  config.optimizer.type = config::OptimizerType::kSgd;
  EXPECT_TRUE(verify_null_slices(config).empty());
  config.optimizer.type = config::OptimizerType::kAdamw;
  config.model.type = partition::ModelType::kLlama;
  config.model.llama = partition::llama_defaults(config.model.llama);
  EXPECT_TRUE(verify_null_slices(config).empty());
}

}  // namespace
}  // namespace cleave::train::verify_compare_test
