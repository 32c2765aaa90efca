// The profile the planner measures itself (measure_this_machine: `cleave plan`, `simulate --config` and `cleave run`
// without --profile) states no memory cap, and the profile format has one spelling of that, "device_memory_GiB":
// "none" (0 bytes in memory): written, it reads back unchanged, so a plan made from the kept file has the cap the
// same plan made without a file has (none: only --memory-limit or device.memory_limit). A number <= 0 or another
// string is refused, naming the key, the file and "none".
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"
#include "support/scratch_dir_test.hpp"

namespace cleave::planner::this_machine_profile_test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTiny = R"({
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 2, "seq_len": 16},
  "batch": {"global_batch_size": 4, "micro_batch_size": 1},
  "optimizer": {"type": "adamw"}, "data": {"type": "synthetic"}})";

class ThisMachineProfile : public testing::ScratchDirTest {
 protected:
  ThisMachineProfile() : ScratchDirTest("cleave_this_machine_profile_test_") {}

  // load_profile's error for `profile` with device_memory_GiB set to `memory` ("" when it loads).
  std::string refusal(const nlohmann::json& memory) {
    HardwareProfile p;
    p.name = p.source = "test";
    p.flops_f32 = p.flops_bf16 = 1e9;
    p.memory_bandwidth_Bps = 1e9;
    p.device_memory = 1LL << 30;
    nlohmann::json j = profile_to_json(p);
    j["device_memory_GiB"] = memory;
    try {
      load_profile(write("p.json", j.dump()));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(ThisMachineProfile, StatesNoCapAndReadsBackAsWritten) {
  const config::RunConfig config = config::parse_config(kTiny, "<string>", {});
  const HardwareProfile measured = measure_this_machine(run_plan::model_spec(config.model), 2);
  EXPECT_EQ(measured.device_memory, 0);
  const nlohmann::json j = profile_to_json(measured);
  EXPECT_EQ(j.at("device_memory_GiB"), "none");
  const std::string path = write("measured.json", j.dump(2));
  const HardwareProfile back = load_profile(path);  // the reader used to refuse the measured profile's 0
  EXPECT_EQ(back.device_memory, 0);
  EXPECT_GT(back.flops_f32, 0);
  EXPECT_EQ(profile_to_json(back), j);  // round trip
}

TEST_F(ThisMachineProfile, PlanFromTheKeptFileHasTheCapOfAPlanWithout) {
  const config::RunConfig config = config::parse_config(kTiny, "<string>", {});
  const PlanningSetup without = planning_setup(config, "", "", 2);
  EXPECT_EQ(without.options.memory_limit, 0);  // `cleave plan` without --profile: no cap, as before
  const std::string path = write("kept.json", profile_to_json(without.profile).dump(2));
  EXPECT_EQ(planning_setup(config, path, "", 2).options.memory_limit, 0);
  EXPECT_EQ(planning_setup(config, path, "64MiB", 2).options.memory_limit, 64LL << 20);  // --memory-limit still caps
  const config::RunConfig capped = config::parse_config(kTiny, "<string>", {"device.memory_limit=32MiB"});
  EXPECT_EQ(planning_setup(capped, path, "", 2).options.memory_limit, 32LL << 20);
}

TEST_F(ThisMachineProfile, NumberOrNoneElseRefusedNamingTheFix) {
  EXPECT_EQ(refusal(80), "");
  EXPECT_EQ(refusal("none"), "");
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-1), nlohmann::json("unlimited"), nlohmann::json()}) {
    const std::string e = refusal(bad);
    EXPECT_NE(e.find("'device_memory_GiB' must be a number > 0"), std::string::npos) << bad.dump() << ": " << e;
    EXPECT_NE(e.find("\"none\" for no cap"), std::string::npos) << e;
    EXPECT_NE(e.find("p.json"), std::string::npos) << e;
    EXPECT_NE(e.find(bad.dump()), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace cleave::planner::this_machine_profile_test
