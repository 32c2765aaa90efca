// ProgressLine: into a file (not a terminal) it writes the first item, the last and nothing between within the
// interval, each line "<command>: <noun> d/n (what), <elapsed>"; with a zero interval one line per item; live
// (terminal) it redraws in place and ends with a newline; a disabled line writes nothing; line() always writes.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "engine/core/progress.hpp"

namespace cleave::progress_test {
namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<char>(c));
  return out;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ProgressLine, ALogGetsTheFirstAndLastItemWithinTheInterval) {
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p("profile", true, f, false, 3600.0);
    for (int i = 1; i <= 40; ++i) p.update(i, 40, "block", "transformer_block d32");
  }
  const std::string text = contents(f);
  EXPECT_EQ(count(text, "\n"), 2) << text;
  EXPECT_EQ(text.rfind("profile: block 1/40 (transformer_block d32), 0 s, about 0 s left\n", 0), 0u) << text;
  EXPECT_NE(text.find("profile: block 40/40 (transformer_block d32), 0 s\n"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
  std::fclose(f);
}

TEST(ProgressLine, ZeroIntervalWritesEveryItemAndLineAlwaysWrites) {
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p("trial", true, f, false, 0.0);
    for (int i = 1; i <= 3; ++i) p.update(i, 3, "run", "");
    p.line("round 1: done");
  }
  const std::string text = contents(f);
  EXPECT_EQ(count(text, "\n"), 4) << text;
  EXPECT_NE(text.find("trial: run 2/3, 0 s"), std::string::npos) << text;
  EXPECT_NE(text.find("trial: round 1: done\n"), std::string::npos) << text;
  std::fclose(f);
}

TEST(ProgressLine, LiveRedrawsInPlaceAndEndsTheLine) {
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p("profile", true, f, true);
    p.update(1, 3, "block", "a");
    p.update(2, 3, "block", "b");
    p.line("optimizer");
    p.update(1, 2, "collective", "");
  }
  const std::string text = contents(f);
  EXPECT_EQ(count(text, "\r"), 4) << text;
  EXPECT_NE(text.find("\rprofile: block 2/3 (b), 0 s, about 0 s left\x1b[K\n\rprofile: optimizer\x1b[K\n"),
            std::string::npos);
  EXPECT_EQ(text.back(), '\n');  // the destructor ends the open line
  std::fclose(f);
}

TEST(ProgressLine, DisabledWritesNothing) {
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p("profile", false, f, false, 0.0);
    p.update(1, 1, "block", "a");
    p.line("x");
  }
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(FormatSeconds, MinutesAndHours) {
  EXPECT_EQ(format_seconds(12.4), "12 s");
  EXPECT_EQ(format_seconds(185), "3 min 05 s");
  EXPECT_EQ(format_seconds(3720), "1 h 02 min");
  EXPECT_EQ(format_seconds(-1), "0 s");
}

}  // namespace
}  // namespace cleave::progress_test
