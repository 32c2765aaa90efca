// cleave verify's report (engine/train/verify.hpp format_report): a failure on the parameters alone of an AdamW run
// says why a correct layout can fail there and how to check it instead; no such line otherwise. With a bf16 floor the
// table shows each tensor's difference against its movement, the floor line names the twin and the tolerance, and a
// failure beyond it says it is not rounding.
#include <gtest/gtest.h>

#include <string>

#include "engine/train/verify.hpp"

namespace cleave::train {
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
  r.floor = NoiseFloor{"device.blas openblas instead of onednn", 0.0631, "blocks.2.attn.qkv.weight", 3e-5, 3};
  r.params_within = true;
  r.passed = true;
  const std::string passed = format_report(r, options);
  EXPECT_NE(passed.find("of movement"), std::string::npos) << passed;
  EXPECT_NE(passed.find("bf16 noise floor: the reference run again with device.blas openblas instead of onednn"),
            std::string::npos) << passed;
  EXPECT_NE(passed.find("within 3 x that, 0.189, of its movement: the layout's largest is 0.058"), std::string::npos)
      << passed;
  EXPECT_NE(passed.find("or the bf16 floor's 0.189 of movement): PASS"), std::string::npos) << passed;
  r.params[0].moved = 0.53;
  r.params_within = false;
  r.passed = false;
  const std::string failed = format_report(r, options);
  EXPECT_NE(failed.find("by more than the same run differs from itself"), std::string::npos) << failed;
  EXPECT_EQ(failed.find(kHint), std::string::npos) << failed;
}

}  // namespace
}  // namespace cleave::train
