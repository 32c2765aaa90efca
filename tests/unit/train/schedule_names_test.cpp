// The config layer validates parallel.schedule against its own list (engine/config cannot depend on the
// pipeline library); this keeps that list and the schedule registry (pipeline/schedules) the same set.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "engine/config/config.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::train {
namespace {

TEST(ScheduleNames, ConfigListEqualsTheRegistry) {
  std::set<std::string> config_names(config::known_schedules().begin(), config::known_schedules().end());
  std::set<std::string> registry_names;
  for (auto name : pipeline::schedule_names()) registry_names.emplace(name);
  EXPECT_EQ(config_names, registry_names);
  EXPECT_EQ(config_names.size(), config::known_schedules().size()) << "a name listed twice";
  EXPECT_GE(registry_names.size(), 5u);
}

}  // namespace
}  // namespace cleave::train
