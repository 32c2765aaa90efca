// CLEAVE_FAULT_INJECT (the failure drills' test hook): the RANK:STEP:WHERE[:ACTION] form, errors naming the
// variable and the bad part, and a plan that is due only at its rank, step and point, once; a thrown fault
// names the step, the place and the rank.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/error.hpp"
#include "engine/train/fault_injection.hpp"

namespace cleave::train::fault_injection_test {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_fault_plan(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(FaultInjection, ParsesTheForms) {
  const FaultPlan kill = parse_fault_plan("1:3:forward:kill");
  EXPECT_EQ(kill.rank, 1);
  EXPECT_EQ(kill.step, 3);
  EXPECT_EQ(kill.point, FaultPoint::kForward);
  EXPECT_EQ(kill.action, FaultAction::kKill);
  const FaultPlan stop = parse_fault_plan("0:12:dp_reduce:stop");
  EXPECT_EQ(stop.point, FaultPoint::kDpReduce);
  EXPECT_EQ(stop.action, FaultAction::kStop);
  EXPECT_EQ(parse_fault_plan("2:1:forward").action, FaultAction::kThrow);  // the default
  const FaultPlan save = parse_fault_plan("1:8:save:kill");
  EXPECT_EQ(save.point, FaultPoint::kSave);
  EXPECT_EQ(save.step, 8);
}

TEST(FaultInjection, ErrorsNameTheVariableAndThePart) {
  EXPECT_NE(error_of("1:3").find("CLEAVE_FAULT_INJECT='1:3': expected RANK:STEP:WHERE[:ACTION]"), std::string::npos);
  EXPECT_NE(error_of("x:3:forward").find("RANK 'x' is not an integer >= 0"), std::string::npos);
  EXPECT_NE(error_of("1:0:forward").find("STEP '0' is not an integer >= 1"), std::string::npos);
  EXPECT_NE(error_of("1:3:backward").find("WHERE 'backward' is unknown"), std::string::npos);
  EXPECT_NE(error_of("1:3:forward:explode").find("ACTION 'explode' is unknown"), std::string::npos);
  EXPECT_NE(error_of("1:3:forward:kill:now").find("expected RANK:STEP:WHERE"), std::string::npos);
}

TEST(FaultInjection, DueOnceAtItsRankStepAndPoint) {
  FaultPlan plan = parse_fault_plan("1:3:forward");
  EXPECT_FALSE(plan.due(0, 3, FaultPoint::kForward));
  EXPECT_FALSE(plan.due(1, 2, FaultPoint::kForward));
  EXPECT_FALSE(plan.due(1, 3, FaultPoint::kDpReduce));
  ASSERT_TRUE(plan.due(1, 3, FaultPoint::kForward));
  try {
    plan.fire("stage 1 forward of micro-batch 1");
    FAIL() << "a throw plan did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "injected fault (CLEAVE_FAULT_INJECT) in step 3, stage 1 forward of micro-batch 1 on rank 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(plan.due(1, 3, FaultPoint::kForward));  // fired: never again
}

}  // namespace
}  // namespace cleave::train::fault_injection_test
