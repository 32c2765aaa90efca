// cleave verify's bounds beyond the floors, as pure functions: fp32 AdamW's per-element bound
// (engine/train/verify_adamw_bound.hpp: the sensitivity from v, the gradient noise the order twins show, the check
// that lets a noise-dominated element move and holds a signal one to rounding), bf16 AdamW's per-step loss floor
// (losses_within), and the routing divergence of a moe layout (first_routing_divergence).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/train/verify.hpp"
#include "engine/train/verify_adamw_bound.hpp"

namespace cleave::train::verify_adamw_bound_test {
namespace {

config::OptimizerConfig constant_adamw(double lr) {
  config::OptimizerConfig o;
  o.type = config::OptimizerType::kAdamw;
  o.lr = lr;
  o.warmup_steps = 0;
  o.schedule = config::LrScheduleType::kConstant;
  return o;
}

TEST(VerifyAdamwBound, SensitivityIsLrOverTheBiasCorrectedRmsPlusTheVTermPerStep) {
  const config::OptimizerConfig o = constant_adamw(0.01);
  // After update 1, v = (1 - β2) g^2: v̂ = g^2, so S = lr (1 + B_1) / (|g| + eps) with B_1 = 1.
  ParameterMap s;
  const float g = 0.5f;
  add_adamw_sensitivity(s, {{"w", {static_cast<float>((1 - 0.999) * g * g), 0.0f}}}, o, 3, 0);
  EXPECT_NEAR(s.at("w")[0], 0.01 * 2 / (0.5 + 1e-8), 1e-6);
  EXPECT_NEAR(s.at("w")[1], 0.01 * 2 / 1e-8, 1e-6 * 0.01 * 2 / 1e-8);  // a zero gradient: lr / eps
  // Update 2 adds lr (1 + B_2 sqrt(2)) / (sqrt(v / (1 - β2^2)) + eps) to what was there.
  const double v2 = 0.999 * (1 - 0.999) * g * g + (1 - 0.999) * g * g;
  const double before = s.at("w")[0];
  add_adamw_sensitivity(s, {{"w", {static_cast<float>(v2), 0.0f}}}, o, 3, 1);
  const double expected = 0.01 * (1 + adamw_step_bound(0.9, 0.999, 2) * std::sqrt(2.0)) /
                          (std::sqrt(v2 / (1 - 0.999 * 0.999)) + 1e-8);
  EXPECT_NEAR(s.at("w")[0] - before, expected, 1e-5 * expected);
}

// A tensor of 4 elements: 0 and 1 with a signal gradient (S small), 2 with a near-zero one (S large), 3 never
// moved apart by the twins.
struct Tiny {
  ParameterMap reference{{"w", {0.0f, 0.0f, 0.0f, 0.0f}}};  // differences exact in f32
  ParameterMap sensitivity{{"w", {0.02f, 0.02f, 2000.0f, 0.02f}}};
  ElementBound bound() const {
    ParameterMap twin = reference;
    twin.at("w")[0] += 1e-7f;  // σ = 1e-7 / 0.02 = 5e-6 from the signal element...
    twin.at("w")[2] += 2e-3f;      // ...and 2e-3 / 2000 = 1e-6 from the noise one: σ the larger
    const std::pair<const ParameterMap*, const ParameterMap*> pair{&twin, &reference};
    ElementBound b;
    b.noise = gradient_noise(std::span(&pair, 1), sensitivity, {});
    b.sensitivity = sensitivity;
    b.factor = 3;
    b.cap = 0.08;  // 2 x 4 steps x lr 0.01
    return b;
  }
};

TEST(VerifyAdamwBound, NoiseIsTheLargestDifferenceOverSensitivityAndNaNOrAnUnsteppedElementSaySo) {
  const Tiny t;
  const ElementBound b = t.bound();
  EXPECT_NEAR(b.noise.at("w"), 1e-7 / 0.02, 1e-10);
  ParameterMap nan = t.reference;
  nan.at("w")[1] = std::nanf("");
  const std::pair<const ParameterMap*, const ParameterMap*> pair{&nan, &t.reference};
  EXPECT_TRUE(std::isnan(gradient_noise(std::span(&pair, 1), t.sensitivity, {}).at("w")));
  ParameterMap zero_s = t.sensitivity;
  zero_s.at("w")[0] = 0;
  ParameterMap moved = t.reference;
  moved.at("w")[0] += 1e-3f;
  const std::pair<const ParameterMap*, const ParameterMap*> p2{&moved, &t.reference};
  EXPECT_TRUE(std::isinf(gradient_noise(std::span(&p2, 1), zero_s, {}).at("w")));
  // A null slice's elements are left out.
  const partition::NullGradient slice{"w", 0, 1, "test"};
  EXPECT_EQ(gradient_noise(std::span(&p2, 1), zero_s, std::span(&slice, 1)).at("w"), 0.0);
}

TEST(VerifyAdamwBound, ANoiseDominatedElementMayMoveUpToTheCapAndASignalElementOnlyByRounding) {
  const Tiny t;
  const ElementBound b = t.bound();
  // The noise element: 3 x 5e-6 x 2000 = 0.03 allowed (under the cap 0.08): a step-sized difference passes.
  ParameterMap layout = t.reference;
  layout.at("w")[2] += 0.02f;
  EXPECT_TRUE(element_check("w", layout, t.reference, b, 0, {}).within());
  layout.at("w")[2] = t.reference.at("w")[2] + 0.05f;  // past 0.03
  ElementCheck c = element_check("w", layout, t.reference, b, 0, {});
  EXPECT_FALSE(c.within());
  EXPECT_EQ(c.worst, 2);
  // The signal element: 3 x 5e-6 x 0.02 = 3e-7 allowed: half an AdamW step (5e-3) fails, and so does a flip-sized 2e-2.
  layout = t.reference;
  layout.at("w")[1] += 5e-3f;
  c = element_check("w", layout, t.reference, b, 0, {});
  EXPECT_FALSE(c.within());
  EXPECT_EQ(c.worst, 1);
  EXPECT_NEAR(c.allowed, 3e-7, 1e-9);
  // ...unless the tensor rules already allow it (their absolute tolerance is a floor under every element).
  EXPECT_TRUE(element_check("w", layout, t.reference, b, 6e-3, {}).within());
  // The cap: an element that moves more than any two AdamW runs can fails however noisy.
  ElementBound loud = b;
  loud.noise.at("w") = 1.0;
  layout = t.reference;
  layout.at("w")[2] += 0.09f;
  EXPECT_FALSE(element_check("w", layout, t.reference, loud, 0, {}).within());
  // NaN fails; a tensor the twins left identical gets nothing from this rule.
  layout = t.reference;
  layout.at("w")[3] = std::nanf("");
  EXPECT_FALSE(element_check("w", layout, t.reference, b, 1.0, {}).within());
  ElementBound quiet = b;
  quiet.noise.at("w") = 0;
  layout = t.reference;
  layout.at("w")[2] += 1e-6f;
  EXPECT_FALSE(element_check("w", layout, t.reference, quiet, 1e-7, {}).within());
}

TEST(VerifyLossFloor, AStepPassesWithinTheToleranceOrTheTwinsDifferenceAtThatStepTimesTheFactor) {
  const std::vector<double> reference = {4.0, 3.0, 2.0};
  const std::vector<double> layout = {4.0, 3.003, 2.0};  // 1e-3 at step 2
  EXPECT_FALSE(losses_within(layout, reference, 4e-4, {}, 0));
  EXPECT_TRUE(losses_within(layout, reference, 4e-4, {0, 2.5e-4, 0}, 4.24));   // 1.06e-3
  EXPECT_FALSE(losses_within(layout, reference, 4e-4, {0, 2.0e-4, 0}, 4.24));  // 8.5e-4
  EXPECT_FALSE(losses_within(layout, reference, 4e-4, {0, 0, 1.0}, 4.24));     // another step's floor is no help
  EXPECT_FALSE(losses_within({4.0, 3.0}, reference, 1, {}, 0));                 // a step missing
  EXPECT_FALSE(losses_within({4.0, std::nan(""), 2.0}, reference, 1, {1, 1, 1}, 4));
  EXPECT_EQ(largest_per_step({1e-4, 3e-4}, {2e-4, 1e-4, 5e-5}), (std::vector<double>{2e-4, 3e-4, 5e-5}));
}

TEST(VerifyRouting, TheFirstStepWhoseCountsOrImbalanceDifferIsFoundWithTheTokensMoved) {
  const std::vector<std::pair<std::string, double>> fields = {
      {"moe_aux_loss", 0.1}, {"moe_load_imbalance", 1.25}, {"moe_tokens_e0", 60}, {"moe_tokens_e1", 68}};
  const RoutingStep r = routing_of(fields);
  EXPECT_EQ(r.tokens, (std::vector<double>{60, 68}));
  EXPECT_EQ(r.imbalance, 1.25);
  const std::vector<RoutingStep> reference = {{{60, 68}, 1.25}, {{64, 64}, 1.0}, {{64, 64}, 1.0}};
  EXPECT_FALSE(first_routing_divergence(reference, reference));
  std::vector<RoutingStep> layout = reference;
  layout[1].tokens = {63, 65};  // one token moved at step 2
  auto d = first_routing_divergence(layout, reference);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->step, 2);
  EXPECT_EQ(d->moved, 1);
  EXPECT_TRUE(d->near_tie());
  layout[1].tokens = {54, 74};  // ten
  d = first_routing_divergence(layout, reference);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->moved, 10);
  EXPECT_FALSE(d->near_tie());
  layout = reference;
  layout[2].imbalance = 1.03;  // a swap between blocks: the sums agree, the imbalance does not
  d = first_routing_divergence(layout, reference);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->step, 3);
  EXPECT_EQ(d->moved, 1);
}

}  // namespace
}  // namespace cleave::train::verify_adamw_bound_test
