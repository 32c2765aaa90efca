// `cleave run`'s re-plan inputs (engine/supervise/layout_choice.hpp): the re-plan prices the device the job runs on,
// so a --profile of another device than the config's device.type is bad input (InputError, exit 64) naming both
// devices, the profile and the fixes; a profile of the config's own device passes. describe() names a layout's schedule
// as the run log does: a multi-chunk schedule at pp 1 runs its chunks on one rank (it was "single stage").
#include <gtest/gtest.h>

#include <string>

#include "engine/config/config.hpp"
#include "engine/core/input_error.hpp"
#include "engine/supervise/layout_choice.hpp"

namespace cleave::supervise::layout_choice_test {
namespace {

config::RunConfig config_on(DeviceType device) {
  config::RunConfig config;
  config.device.type = device;
  return config;
}

std::string refusal(DeviceType profile, DeviceType job) {
  try {
    check_profile_device("profiles/some.json", profile, config_on(job));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ProfileDevice, AProfileOfTheJobsDevicePasses) {
  EXPECT_EQ(refusal(DeviceType::kCpu, DeviceType::kCpu), "");
  EXPECT_EQ(refusal(DeviceType::kCuda, DeviceType::kCuda), "");
}

TEST(ProfileDevice, AGpuProfileForACpuJobIsBadInputNamingBothDevicesAndTheFix) {
  const std::string m = refusal(DeviceType::kCuda, DeviceType::kCpu);
  ASSERT_FALSE(m.empty()) << "a cuda profile for a cpu job was accepted";
  EXPECT_NE(m.find("--profile profiles/some.json describes a cuda machine"), std::string::npos) << m;
  EXPECT_NE(m.find("the config's device.type \"cpu\""), std::string::npos) << m;
  EXPECT_NE(m.find("nothing was started"), std::string::npos) << m;
  EXPECT_NE(m.find("drop --profile"), std::string::npos) << m;
  EXPECT_NE(m.find("set device.type=cuda after the --"), std::string::npos) << m;
}

TEST(ProfileDevice, ACpuProfileForAGpuJobIsRefusedToo) {
  const std::string m = refusal(DeviceType::kCpu, DeviceType::kCuda);
  EXPECT_NE(m.find("describes a cpu machine, but the job runs on the config's device.type \"cuda\""), std::string::npos)
      << m;
}

TEST(DescribeLayout, NamesTheScheduleAndWhatOneRankRuns) {
  planner::PlanChoice c;
  c.global_batch = 8;
  c.pp = 2;
  c.schedule = "zb_v";
  c.virtual_stages = 2;
  EXPECT_EQ(describe(c), "tp1 pp2 dp1, micro 1 x accum 8, zb_v");
  c.pp = 1;
  EXPECT_EQ(describe(c), "tp1 pp1 dp1, micro 1 x accum 8, zb_v on one rank, running its 2 chunks");
  c.schedule = "1f1b";
  c.virtual_stages = 1;
  EXPECT_EQ(describe(c), "tp1 pp1 dp1, micro 1 x accum 8, single stage");
}

}  // namespace
}  // namespace cleave::supervise::layout_choice_test
