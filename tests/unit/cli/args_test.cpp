// The commands' argument parser (engine/cli/args.hpp): typed values parsed once, defaults, --set repeated,
// positionals, --name=value, and refusals that name the command, the option and the known options.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/cli/args.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::cli::args_test {
namespace {

ArgParser demo() {
  ArgParser p("demo", "cleave demo CONFIG [options]", "Does a demo.");
  p.positional("CONFIG", "config file")
      .config_overrides()
      .count("--steps", "N", "steps to run", 10)
      .count("--warmup", "W", "warm-up steps", 3, 0)
      .number("--tolerance", "X", "largest relative difference", 1e-5)
      .size("--memory-limit", "SIZE", "cap per rank, e.g. 96MiB")
      .count_list("--tp", "LIST", "widths, e.g. 1,2,4")
      .text("--out", "DIR", "output directory", "bench")
      .flag("--explain", "say why");
  return p;
}

// The message of the InputError (bad input: ExitCode::kBadInput) parsing `args` throws; "" when none is thrown (a
// plain Error escapes and fails the test).
std::string refusal(const ArgParser& p, const std::vector<std::string>& args) {
  try {
    p.parse(args);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(CliArgs, DefaultsWhenNothingIsGiven) {
  const Args a = demo().parse(std::vector<std::string>{});
  EXPECT_FALSE(a.help());
  EXPECT_EQ(a.count("--steps"), 10);
  EXPECT_FALSE(a.given("--steps"));
  EXPECT_EQ(a.count("--warmup"), 3);
  EXPECT_DOUBLE_EQ(a.number("--tolerance"), 1e-5);
  EXPECT_FALSE(a.size("--memory-limit").has_value());
  EXPECT_TRUE(a.counts("--tp").empty());
  EXPECT_EQ(a.text("--out"), "bench");
  EXPECT_FALSE(a.on("--explain"));
  EXPECT_TRUE(a.all("--set").empty());
  EXPECT_TRUE(a.positionals().empty());
  EXPECT_EQ(a.positional(0), "");
}

TEST(CliArgs, ValuesAreParsedByKindInBothSpellings) {
  const Args a = demo().parse(std::vector<std::string>{
      "c.json", "--steps", "37", "--warmup=0", "--tolerance", "2.5e-3", "--memory-limit", "96MiB", "--tp=4,1,2,2",
      "--out", "runs/x", "--explain", "--set", "train.steps=5", "--set=optimizer.lr=3e-4"});
  EXPECT_EQ(a.positional(0), "c.json");
  EXPECT_EQ(a.count("--steps"), 37);
  EXPECT_TRUE(a.given("--steps"));
  EXPECT_EQ(a.count("--warmup"), 0);
  EXPECT_DOUBLE_EQ(a.number("--tolerance"), 2.5e-3);
  EXPECT_EQ(a.size("--memory-limit"), 96LL * 1024 * 1024);
  EXPECT_EQ(a.counts("--tp"), (std::vector<std::int64_t>{1, 2, 4}));  // sorted, duplicates removed
  EXPECT_EQ(a.text("--out"), "runs/x");
  EXPECT_TRUE(a.on("--explain"));
  // Repeated, in order; the value after the first '=' is kept whole.
  EXPECT_EQ(a.all("--set"), (std::vector<std::string>{"train.steps=5", "optimizer.lr=3e-4"}));
}

TEST(CliArgs, TheLastValueOfAnOptionWins) {
  const Args a = demo().parse(std::vector<std::string>{"--steps", "4", "--steps", "9", "--out", "a", "--out", "b"});
  EXPECT_EQ(a.count("--steps"), 9);
  EXPECT_EQ(a.text("--out"), "b");
}

TEST(CliArgs, HelpStopsReading) {
  EXPECT_TRUE(demo().parse(std::vector<std::string>{"--help", "--frobnicate"}).help());
  EXPECT_TRUE(demo().parse(std::vector<std::string>{"c.json", "-h"}).help());
}

// Every command's entry point: the help text on stdout and true only when --help was given.
TEST(CliArgs, HelpIsPrintedOnlyWhenAsked) {
  const ArgParser p = demo();
  ::testing::internal::CaptureStdout();
  const bool asked = p.print_help_if_asked(p.parse(std::vector<std::string>{"c.json", "--help"}));
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(asked);
  EXPECT_EQ(printed, p.help_text());
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(p.print_help_if_asked(p.parse(std::vector<std::string>{"c.json", "--steps", "4"})));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
}

TEST(CliArgs, UnknownOptionNamesItTheKnownOnesAndTheLikelyOne) {
  const std::string m = refusal(demo(), {"--stepz", "3"});
  EXPECT_NE(m.find("demo: unknown option '--stepz'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean --steps?"), std::string::npos) << m;
  EXPECT_NE(m.find("known: --set, --steps, --warmup, --tolerance, --memory-limit, --tp, --out, --explain, --help"),
            std::string::npos)
      << m;
  const std::string far = refusal(demo(), {"--frobnicate"});
  EXPECT_NE(far.find("unknown option '--frobnicate'"), std::string::npos) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

TEST(CliArgs, MissingValueNamesTheOption) {
  const std::string m = refusal(demo(), {"c.json", "--steps"});
  EXPECT_NE(m.find("demo: --steps needs a value: --steps N"), std::string::npos) << m;
}

TEST(CliArgs, MalformedValuesAreRefusedWithTheOptionAndTheText) {
  EXPECT_NE(refusal(demo(), {"--steps", "0"}).find("--steps expects a whole number >= 1, got '0'"), std::string::npos);
  EXPECT_NE(refusal(demo(), {"--steps", "7x"}).find("got '7x'"), std::string::npos);
  EXPECT_NE(refusal(demo(), {"--steps", "99999999999"}).find("--steps expects a whole number"), std::string::npos);
  EXPECT_NE(refusal(demo(), {"--warmup", "-1"}).find("--warmup expects a whole number >= 0, got '-1'"),
            std::string::npos);
  EXPECT_NE(refusal(demo(), {"--tolerance", "fast"}).find("--tolerance expects a non-negative number, got 'fast'"),
            std::string::npos);
  EXPECT_NE(refusal(demo(), {"--tolerance", "inf"}).find("--tolerance expects"), std::string::npos);
  EXPECT_NE(refusal(demo(), {"--memory-limit", "12 parsecs"}).find("demo: --memory-limit"), std::string::npos);
  EXPECT_NE(refusal(demo(), {"--tp", "1,,2"}).find("--tp expects a comma-separated list of whole numbers >= 1, got "
                                                   "'1,,2'"),
            std::string::npos);
  EXPECT_NE(refusal(demo(), {"--explain=yes"}).find("--explain takes no value, got 'yes'"), std::string::npos);
}

TEST(CliArgs, AnUpperBoundIsCheckedAndNamed) {
  ArgParser p("bounded", "cleave bounded", "A count with a maximum.");
  p.count("--ways", "K", "ways", 2, 1, 8);
  EXPECT_EQ(p.parse(std::vector<std::string>{"--ways", "8"}).count("--ways"), 8);
  EXPECT_NE(refusal(p, {"--ways", "9"}).find("bounded: --ways expects a whole number >= 1 and <= 8, got '9'"),
            std::string::npos);
}

TEST(CliArgs, PositionalsAreCountedAndNamed) {
  const std::string m = refusal(demo(), {"a.json", "b.json"});
  EXPECT_NE(m.find("demo: more than one config file given ('a.json' and 'b.json')"), std::string::npos) << m;
  ArgParser none("flat", "cleave flat", "No positionals.");
  none.flag("--x", "x");
  EXPECT_NE(refusal(none, {"stray"}).find("flat: unexpected argument 'stray'"), std::string::npos);
}

TEST(CliArgs, HelpIsWrittenFromTheDeclarations) {
  const std::string h = demo().epilog("example: cleave demo c.json").help_text();
  EXPECT_EQ(h.rfind("usage: cleave demo CONFIG [options]\n\nDoes a demo.\n", 0), 0u) << h;
  EXPECT_NE(h.find("  --steps N             steps to run (default 10)\n"), std::string::npos) << h;
  EXPECT_NE(h.find("  --set key.path=value  override one config key"), std::string::npos) << h;
  EXPECT_NE(h.find("\n                        the value is parsed as JSON"), std::string::npos) << h;
  EXPECT_NE(h.find("  --out DIR             output directory (default bench)\n"), std::string::npos) << h;
  EXPECT_NE(h.find("  --memory-limit SIZE   cap per rank, e.g. 96MiB\n"), std::string::npos) << h;
  EXPECT_NE(h.find("  --help                this text\n"), std::string::npos) << h;
  EXPECT_NE(h.find("\nexample: cleave demo c.json\n"), std::string::npos) << h;
}

TEST(CliArgs, ClosestSpellingOnlyForLikelyTypos) {
  const std::vector<std::string> names = {"--schedules", "--steps", "--warmup", "--out"};
  EXPECT_EQ(closest_spelling("--schedule", names), "--schedules");
  EXPECT_EQ(closest_spelling("--wramup", names), "--warmup");
  EXPECT_EQ(closest_spelling("--completely-different", names), "");
}

TEST(CliArgs, ReadingAnUndeclaredOptionIsABug) {
  const Args a = demo().parse(std::vector<std::string>{});
  EXPECT_THROW(a.given("--nope"), InternalError);
  EXPECT_THROW(a.text("--steps"), InternalError);  // declared as a count
}

}  // namespace
}  // namespace cleave::cli::args_test

namespace cleave::cli::args_test {
namespace {

TEST(CliArgs, RepeatedLastPositionalTakesAnyNumber) {
  ArgParser p("files", "cleave files FILES... --out DIR", "Many positionals.");
  p.positionals("FILES...", "text file").text("--out", "DIR", "where");
  const Args a = p.parse(std::vector<std::string>{"a.txt", "--out", "d", "b.txt", "c.txt"});
  EXPECT_EQ(a.positionals(), (std::vector<std::string>{"a.txt", "b.txt", "c.txt"}));
  EXPECT_EQ(a.text("--out"), "d");
  EXPECT_TRUE(p.parse(std::vector<std::string>{"--out", "d"}).positionals().empty());
  ArgParser one("one", "cleave one FILE", "One positional.");
  one.positional("FILE", "file");
  EXPECT_THROW(one.parse(std::vector<std::string>{"a", "b"}), Error);
}

}  // namespace
}  // namespace cleave::cli::args_test
