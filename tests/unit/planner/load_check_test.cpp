// A profile's record of its own load (partition/load_check.hpp): judge_load on figures recorded by two real profiles
// of one tiny GPT (2 ranks, 2 vCPU AMD EPYC Zen 4, 2026-12-01; benchmarks/planner/RESULTS-2026-12-01-r-profileload.md),
// one with no load of ours (other helpers' tests kept the load average at 3.2 on the 2 cores) and one with two busy
// loops of ours started 4 s in, never on the machine the test runs on (no quiet profile could be taken that hour:
// the load average stayed 3.1-4.2); a steady record is not flagged and each threshold crossed alone flags; the file form round-trips, a profile written before the record reads without one and is never
// flagged, and a bad record is refused by name.
#include "partition/load_check.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "engine/core/error.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "support/scratch_dir_test.hpp"
#include "synthetic_profile.hpp"

namespace cleave::partition::load_check_test {
namespace {

// Recorded: RESULTS-2026-12-01-r-profileload.md, profile A (no load of ours; the other helpers' load).
LoadCheck others_profile() {
  LoadCheck c;
  c.controls = {{"start", 20.771e-3, 18.8865e-3},
                {"after the block tables", 26.7713e-3, 19.159e-3},
                {"after the optimizer", 21.7962e-3, 18.9262e-3},
                {"after the collectives and waits", 21.3396e-3, 19.248e-3},
                {"end", 23.6625e-3, 18.944e-3}};
  c.loadavg_start = 3.17;
  c.loadavg_end = 3.07;
  c.cores = 2;
  c.own_threads = 2;
  c.seconds = 13.94;
  return c;
}

// Recorded: profile B, the same with two busy loops of ours started 4 s in.
LoadCheck loaded_profile() {
  LoadCheck c;
  c.controls = {{"start", 19.0775e-3, 18.9735e-3},
                {"after the block tables", 35.1271e-3, 22.2305e-3},
                {"after the optimizer", 47.0834e-3, 21.8746e-3},
                {"after the collectives and waits", 34.8907e-3, 21.8938e-3},
                {"end", 53.2086e-3, 39.0795e-3}};
  c.loadavg_start = 2.91;
  c.loadavg_end = 3.64;
  c.cores = 2;
  c.own_threads = 2;
  c.seconds = 25.8;
  return c;
}

TEST(JudgeLoad, ProfileUnderOthersLoadIsDisturbedByItsControl) {
  const LoadVerdict v = judge_load(others_profile());
  EXPECT_TRUE(v.disturbed);
  EXPECT_NEAR(v.drift, 26.7713 / 20.771 - 1, 1e-12);  // at "after the block tables" against "start"
  EXPECT_NE(v.what.find("other work kept the cores busy: load average 3.17"), std::string::npos) << v.what;
  // The same record with its slowest control as fast as the others: the load average alone flags nothing.
  LoadCheck steadied = others_profile();
  for (auto& c : steadied.controls) c = {c.at, 20.771e-3, 20.5e-3};
  EXPECT_FALSE(judge_load(steadied).disturbed) << judge_load(steadied).what;
  EXPECT_EQ(load_warning(steadied, "steadied"), std::nullopt);
}

TEST(JudgeLoad, LoadedRecordedProfileIsDisturbedAndSaysWhyWithTheFix) {
  const LoadVerdict v = judge_load(loaded_profile());
  EXPECT_TRUE(v.disturbed);
  EXPECT_GT(v.drift, kDriftLimit);
  EXPECT_NE(v.what.find("control compute's speed moved"), std::string::npos) << v.what;
  const auto line = load_warning(loaded_profile(), "loaded");
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("profile 'loaded'"), std::string::npos) << *line;
  EXPECT_NE(line->find("on a quiet machine or with fewer ranks"), std::string::npos) << *line;
}

// Each threshold alone flags a profile otherwise quiet: a steady control on a steady machine is not disturbed.
TEST(JudgeLoad, EachThresholdAloneFlags) {
  LoadCheck steady;
  steady.controls = {{"start", 2.0e-3, 1.9e-3},
                {"end", 2.1e-3, 2.0e-3}};
  steady.loadavg_start = 0.2;
  steady.loadavg_end = 2.0;  // the profile's own 2 threads over 120 s: 2 x (1 - e^-2) = 1.73 of it
  steady.cores = 4;
  steady.own_threads = 2;
  steady.seconds = 120;
  const LoadVerdict quiet = judge_load(steady);
  EXPECT_FALSE(quiet.disturbed) << quiet.what;
  EXPECT_NEAR(quiet.drift, 0.05, 1e-12);
  EXPECT_NEAR(quiet.others_end, (2.0 - 2 * (1 - std::exp(-2.0))) / 4, 1e-12);

  LoadCheck moved = steady;
  moved.controls.push_back({"middle", 2.0e-3 * (1 + kDriftLimit) * 1.01, 2.0e-3 * (1 + kDriftLimit)});
  EXPECT_TRUE(judge_load(moved).disturbed);
  EXPECT_NE(judge_load(moved).what.find("at middle"), std::string::npos) << judge_load(moved).what;

  LoadCheck spread = steady;
  spread.controls[0].min_s = spread.controls[0].median_s / (1 + kSpreadLimit) * 0.99;
  EXPECT_TRUE(judge_load(spread).disturbed);

  LoadCheck busy_at_start = steady;
  busy_at_start.loadavg_start = 4 * kOthersPerCore * 1.01;
  busy_at_start.controls[1].median_s = 2.0e-3 * (1 + kDriftLimit / 3) * 1.01;  // with a control that moved a little
  EXPECT_TRUE(judge_load(busy_at_start).disturbed);
  EXPECT_NE(judge_load(busy_at_start).what.find("on 4 cores"), std::string::npos);

  LoadCheck unreadable = steady;  // no /proc/loadavg: the controls alone judge
  unreadable.loadavg_start = unreadable.loadavg_end = -1;
  EXPECT_FALSE(judge_load(unreadable).disturbed);
}

class LoadCheckFile : public testing::ScratchDirTest {
 protected:
  LoadCheckFile() : ScratchDirTest("cleave_load_check_test_") {}
};

TEST_F(LoadCheckFile, RoundTripsAndAnOldProfileReadsWithoutOne) {
  planner::HardwareProfile p = testing::synthetic_profile(1e12, 1e11, {1e-6, 1e10}, {1e-5, 1e9}, 2);
  p.load_check = loaded_profile();
  std::ofstream((dir_ / "new.json").string()) << profile_to_json(p).dump(2);
  const planner::HardwareProfile loaded = planner::load_profile((dir_ / "new.json").string());
  ASSERT_TRUE(loaded.load_check.has_value());
  EXPECT_EQ(load_check_to_json(*loaded.load_check).dump(), load_check_to_json(*p.load_check).dump());
  EXPECT_TRUE(load_warning(loaded.load_check, loaded.name).has_value());

  auto old = profile_to_json(p);  // as written before 2026-12-01: no record, never flagged
  old.erase("load_check");
  std::ofstream((dir_ / "old.json").string()) << old.dump(2);
  const planner::HardwareProfile before = planner::load_profile((dir_ / "old.json").string());
  EXPECT_FALSE(before.load_check.has_value());
  EXPECT_EQ(load_warning(before.load_check, before.name), std::nullopt);
  // Nothing else in the file moved: the record is never priced.
  auto again = profile_to_json(loaded);
  again.erase("load_check");
  EXPECT_EQ(again.dump(), profile_to_json(before).dump());
}

TEST_F(LoadCheckFile, ABadRecordIsRefusedByName) {
  planner::HardwareProfile p = testing::synthetic_profile(1e12, 1e11, {1e-6, 1e10}, {1e-5, 1e9}, 2);
  p.load_check = others_profile();
  auto text = profile_to_json(p);
  text["load_check"]["controls"][0]["min_ms"] = 1e9;  // faster than its median? no: slower
  std::ofstream((dir_ / "bad.json").string()) << text.dump(2);
  try {
    planner::load_profile((dir_ / "bad.json").string());
    FAIL() << "a control whose fastest run is slower than its median loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("load_check.controls[0]: needs 0 < min_ms <= median_ms"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cleave::partition::load_check_test
