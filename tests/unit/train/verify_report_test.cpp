// cleave verify's report (engine/train/verify.hpp format_report): a failure on the parameters alone of an AdamW run
// says why a correct layout can fail there and how to check it instead; no such line otherwise. With a bf16 floor the
// table shows each tensor's difference against its movement, the floor line names the twin and the tolerance, and a
// failure beyond it says it is not rounding. The default loss tolerance: fp32 1e-5; bf16 u / sqrt(tokens), times the
// rounding factor of tensor parallelism's bf16 partial sums. The precision twin's line and a bf16 failure's hint on
// models that route tokens to experts.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/config/config.hpp"

#include "engine/train/verify.hpp"

namespace cleave::train::verify_report_test {
namespace {

constexpr const char* kHint = "with AdamW a parameter whose gradient is near zero";

VerifyReport report_of(double loss_difference, double param_difference, bool adamw) {
  VerifyReport r;
  r.layout_losses = {4.0, 3.9};
  r.reference_losses = {4.0, 3.9};
  r.params = {{"blocks.0.attn.qkv.bias", 384, param_difference * 2.9e-3, param_difference}};
  r.max_loss_difference = loss_difference;
  r.max_param_difference = param_difference;
  r.adamw = adamw;
  r.passed = loss_difference <= 1e-5 && param_difference <= 1e-3;
  return r;
}

// A config of `world` ranks at tensor parallelism `tp`: 16 x 64 = 1024 tokens a step.
config::RunConfig tokens_1024(const std::string& precision, int tp, int world) {
  config::RunConfig c = config::parse_config(R"({
    "model": {"type": "gpt", "vocab_size": 256, "d_model": 128, "n_layers": 2, "n_heads": 4, "seq_len": 64},
    "batch": {"global_batch_size": 16, "micro_batch_size": 8},
    "data": {"type": "synthetic"}
  })", "tokens_1024", {"device.precision=" + precision, "parallel.tensor_model_parallel_size=" + std::to_string(tp)});
  c.resolve(world);
  return c;
}

TEST(VerifyLossTolerance, Bf16CountsTheRoundingsOfTensorParallelPartialSums) {
  const double one_rounding = std::ldexp(1.0, -8) / 32;  // u / sqrt(1024)
  EXPECT_EQ(default_loss_tolerance(tokens_1024("fp32", 2, 2)), 1e-5);
  EXPECT_DOUBLE_EQ(default_loss_tolerance(tokens_1024("bf16", 1, 1)), one_rounding);
  EXPECT_DOUBLE_EQ(default_loss_tolerance(tokens_1024("bf16", 1, 2)), one_rounding);  // dp 2: no partial sums
  // tp 2: two partials, their sum and one rank's rounding, 4 roundings against a reordering's 2.
  EXPECT_DOUBLE_EQ(default_loss_tolerance(tokens_1024("bf16", 2, 2)), one_rounding * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(default_loss_tolerance(tokens_1024("bf16", 4, 4)), one_rounding * std::sqrt(3.0));
  EXPECT_DOUBLE_EQ(tp_rounding_factor(1), 1.0);
  // The loss difference verify holds to it: relative to the reference, the worst step, NaN never within.
  EXPECT_DOUBLE_EQ(max_loss_difference({4.0, 2.5}, {4.0, 2.0}), 0.25);
  EXPECT_TRUE(std::isinf(max_loss_difference({4.0, std::nan("")}, {4.0, 2.0})));
}

TEST(VerifyReport, AdamwParameterOnlyFailureNamesTheCauseAndSgd) {
  VerifyOptions options;
  options.loss_tolerance = 1e-5;
  options.param_tolerance = 1e-3;
  const std::string failed = format_report(report_of(2e-6, 0.646, true), options);
  EXPECT_NE(failed.find("FAIL"), std::string::npos) << failed;
  EXPECT_NE(failed.find(kHint), std::string::npos) << failed;
  EXPECT_NE(failed.find("--set optimizer.type=sgd"), std::string::npos) << failed;
  // Not with SGD, not when the losses disagree too, not on a pass.
  EXPECT_EQ(format_report(report_of(2e-6, 0.646, false), options).find(kHint), std::string::npos);
  EXPECT_EQ(format_report(report_of(3e-3, 0.646, true), options).find(kHint), std::string::npos);
  const std::string passed = format_report(report_of(2e-6, 1e-4, true), options);
  EXPECT_NE(passed.find("PASS"), std::string::npos) << passed;
  EXPECT_EQ(passed.find(kHint), std::string::npos);
}

TEST(VerifyReport, Bf16FloorIsShownAndAFailureBeyondItIsNotRounding) {
  VerifyOptions options;
  VerifyReport r = report_of(2e-6, 0.0115, true);
  r.params[0].moved = 0.058;
  r.floor = noise_floor({{"the reference and twin 1", 0.0631, "blocks.2.attn.qkv.weight"},
                          {"the reference and twin 2", 0.031, "blocks.1.mlp.fc.bias"},
                          {"twins 1 and 2", 0.05, "embed.position"}},
                         3e-5, {"device.blas openblas instead of onednn", "attention's sums reordered"}, 3, 1);
  r.params_within = true;
  r.passed = true;
  const std::string passed = format_report(r, options);
  EXPECT_NE(passed.find("of movement"), std::string::npos) << passed;
  EXPECT_NE(passed.find("bf16 noise floor: the reference run again with device.blas openblas instead of onednn"),
            std::string::npos) << passed;
  EXPECT_NE(passed.find("(twin 1) and with attention's sums reordered (twin 2)"), std::string::npos) << passed;
  EXPECT_NE(passed.find("the reference and twin 1 0.0631 (blocks.2.attn.qkv.weight), the reference and twin 2 0.031 "
                        "(blocks.1.mlp.fc.bias), twins 1 and 2 0.05 (embed.position); the floor is their largest, 0.0631"),
            std::string::npos) << passed;
  EXPECT_NE(passed.find("within 3 x 1 x that (--noise-multiple x sqrt((tp + 2) / 2) at tp > 1), 0.189, of its "
                        "movement: the layout's largest is 0.058"),
            std::string::npos) << passed;
  EXPECT_NE(passed.find("or the bf16 floor's 0.189 of movement): PASS"), std::string::npos) << passed;
  r.params[0].moved = 0.53;
  r.params_within = false;
  r.passed = false;
  const std::string failed = format_report(r, options);
  EXPECT_NE(failed.find("by more than the same run differs from itself"), std::string::npos) << failed;
  EXPECT_EQ(failed.find(kHint), std::string::npos) << failed;
}

// A tensor the precision twin leaves exactly on the reference (a sigmoid router's selection bias, moved by the sign
// of an expert's load) has no finite ratio to it: the line names the tensor and its difference instead of dividing by
// zero (found by benchmarks/verify/layout_sweep.py: "the layout's largest is 1e+297 x").
TEST(VerifyReport, PrecisionTwinLineNamesATensorTheFp32RunLeavesOnTheReference) {
  VerifyOptions options;
  VerifyReport r = report_of(2e-6, 1.0, false);
  r.params = {{"blocks.1.moe.router.bias", 4, 1e-3, 1.0}, {"embed.token", 1024, 7.6e-5, 1.1e-3}};
  r.rounding = RoundingFloor{"device.precision fp32 instead of bf16",
                             {{"blocks.1.moe.router.bias", 0.0}, {"embed.token", 7.7e-5}}, 4.24, 1e-5, false, {}};
  const std::string with_zero = format_report(r, options);
  EXPECT_EQ(with_zero.find("e+29"), std::string::npos) << with_zero;
  EXPECT_NE(with_zero.find("the layout's largest is unbounded (blocks.1.moe.router.bias ends 0.001 from the reference, "
                           "where the fp32 run ends on it exactly)"),
            std::string::npos) << with_zero;
  r.params.erase(r.params.begin());
  const std::string finite = format_report(r, options);
  EXPECT_NE(finite.find("the layout's largest is 0.987 x (embed.token)"), std::string::npos) << finite;
}

// fp32 AdamW's order floor (the order twins' RoundingFloor, `order` set): its own column and line, which say what the
// twins are and why (a near-zero gradient under AdamW), and the verdict names "vs order twin", not fp32.
TEST(VerifyReport, OrderFloorLineSaysWhatTheTwinsAreAndWhy) {
  VerifyOptions options;
  VerifyReport r = report_of(6e-8, 1.81e-3, true);
  r.params = {{"blocks.0.mlp.proj.weight", 4096, 8.97e-5, 1.81e-3}};
  r.rounding = RoundingFloor{"device.blas blis instead of onednn or batch.micro_batch_size 2 instead of 4",
                             {{"blocks.0.mlp.proj.weight", 6.85e-5}}, 4.24, 7.9e-8, true, {}};
  r.params_within = true;
  r.passed = true;
  const std::string out = format_report(r, options);
  EXPECT_NE(out.find("vs order twin\n"), std::string::npos) << out;
  EXPECT_NE(out.find("fp32 AdamW order floor per tensor: the reference run again with device.blas blis instead of "
                     "onednn or batch.micro_batch_size 2 instead of 4"),
            std::string::npos) << out;
  EXPECT_NE(out.find("the layout's largest is 1.31 x (blocks.0.mlp.proj.weight)"), std::string::npos) << out;
  EXPECT_NE(out.find("or 4.24 x vs order twin): PASS"), std::string::npos) << out;
  EXPECT_EQ(out.find("vs fp32"), std::string::npos) << out;
  EXPECT_EQ(out.find("bf16"), std::string::npos) << out;
}

// A bf16 failure on the parameters alone: on a model that routes tokens, the report names a router near-tie and the
// check that separates it (forced routing); under SGD it points to fp32, not to the SGD the run already uses.
TEST(VerifyReport, Bf16ParameterFailureNamesRouterNearTiesOnRoutedModelsAndTheRightCheck) {
  VerifyOptions options;
  VerifyReport r = report_of(2e-6, 1.0, false);
  r.params = {{"blocks.1.moe.router.bias", 4, 1e-3, 1.0}};
  r.rounding = RoundingFloor{"device.precision fp32 instead of bf16", {{"blocks.1.moe.router.bias", 0.0}}, 4.24, 0,
                             false, {}};
  r.params_within = false;
  r.passed = false;
  r.routed = true;
  const std::string routed = format_report(r, options);
  EXPECT_NE(routed.find("router near-tie"), std::string::npos) << routed;
  EXPECT_NE(routed.find("--set model.forced_routing=uniform"), std::string::npos) << routed;
  EXPECT_NE(routed.find("compare with --set device.precision=fp32"), std::string::npos) << routed;
  EXPECT_EQ(routed.find("optimizer.type=sgd"), std::string::npos) << routed;
  r.routed = false;
  r.adamw = true;
  const std::string dense = format_report(r, options);
  EXPECT_EQ(dense.find("router near-tie"), std::string::npos) << dense;
  EXPECT_NE(dense.find("compare with --set optimizer.type=sgd"), std::string::npos) << dense;
}

// A moe layout whose routing diverged fails with that verdict instead of a parameter mismatch; one or two tokens are
// a near-tie, more are not, and a run that passed says nothing of it.
TEST(VerifyReport, RoutingDivergenceIsTheVerdictAndANearTieIsToldFromMore) {
  VerifyOptions options;
  VerifyReport r = report_of(2e-6, 1.0, false);
  r.routed = true;
  r.routing_compared = true;
  r.routing_diverged = RoutingDivergence{2, 1, {44, 46, 47, 55}, {44, 45, 47, 56}};
  const std::string tie = format_report(r, options);
  EXPECT_NE(tie.find(": FAIL (routing diverged on a near-tie: not a parameter mismatch)"), std::string::npos) << tie;
  EXPECT_NE(tie.find("routing diverged at step 2 on a near-tie: 1 token(s) went to another expert than one rank sent "
                     "them to (tokens per expert, summed over the blocks: layout 44 46 47 55, reference 44 45 47 56)"),
            std::string::npos) << tie;
  EXPECT_EQ(tie.find("not rounding (a wrong gradient"), std::string::npos) << tie;
  r.routing_diverged = RoutingDivergence{1, 9, {40, 50}, {49, 41}};
  const std::string more = format_report(r, options);
  EXPECT_NE(more.find(": FAIL (routing diverged)\n"), std::string::npos) << more;
  EXPECT_NE(more.find("9 tokens went to other experts than one rank sent them to (tokens per expert, summed over the "
                      "blocks: layout 40 50, reference 49 41), more than a near-tie tips (2 at most)"),
            std::string::npos) << more;
  r.routing_diverged.reset();  // the counts agreed: no near-tie to suspect, the parameters failed on their own
  const std::string same = format_report(r, options);
  EXPECT_NE(same.find(": FAIL\n"), std::string::npos) << same;
  EXPECT_EQ(same.find("routing diverged"), std::string::npos) << same;
}

}  // namespace
}  // namespace cleave::train::verify_report_test
