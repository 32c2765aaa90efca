// `cleave run --health-check CMD` (engine/supervise/health_check.hpp): the command reaches `sh -c` as given, quotes
// and spaces included (it was spliced between single quotes, so a quoted word split it and every slot failed), and
// each slot's variables are set.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/supervise/health_check.hpp"

namespace cleave::supervise::health_check_test {
namespace {

TEST(HealthCheck, ShellQuoteKeepsEveryCharacter) {
  EXPECT_EQ(shell_quote("plain"), "'plain'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(HealthCheck, QuotedCommandsRunAsGivenWithTheSlotsVariables) {
  const std::vector<Slot> slots = {{"node a", 0}, {"node'b", 1}};
  // Passes on slot 1 only, and only when the quoted words reach the shell whole.
  const std::string command = "test \"$(printf '%s' 'a  b')\" = 'a  b' && test \"$CLEAVE_SLOT_INDEX\" = 1";
  EXPECT_EQ(check_health(command, slots), (std::vector<bool>{false, true}));
  // The host reaches the command as it is, a quote and a space included.
  EXPECT_EQ(check_health("test \"$CLEAVE_SLOT_HOST\" = \"node'b\"", slots), (std::vector<bool>{false, true}));
  EXPECT_EQ(check_health("test \"$CLEAVE_SLOT_HOST\" = 'node a'", slots), (std::vector<bool>{true, false}));
  EXPECT_EQ(check_health("", slots), (std::vector<bool>{true, true}));
}

}  // namespace
}  // namespace cleave::supervise::health_check_test
