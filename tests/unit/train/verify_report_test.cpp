// cleave verify's report (engine/train/verify.hpp format_report): a failure on the parameters alone of an AdamW run
// says why a correct layout can fail there and how to check it instead; no such line otherwise.
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

}  // namespace
}  // namespace cleave::train
