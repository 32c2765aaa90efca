// Messages quoted in a summary line (engine/core/one_line.hpp): shorten_at_word keeps a short text whole and cuts
// a long one at a word boundary with " ..." (the plan footnote once ended in "data-paralle)."); escape_control
// keeps an error on one line.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/one_line.hpp"

namespace cleave::one_line_test {
namespace {

TEST(ShortenAtWord, WholeWordsOnly) {
  EXPECT_EQ(shorten_at_word("short reason", 200), "short reason");
  const std::string reason = "batch: global_batch_size 8 is not divisible by micro_batch_size 4 x data-parallel size 4";
  EXPECT_EQ(shorten_at_word(reason, reason.size()), reason);
  // The limit falls inside "data-parallel": the cut is before it, never inside.
  const std::size_t inside = reason.find("data-parallel") + 8;
  EXPECT_EQ(shorten_at_word(reason, inside),
            "batch: global_batch_size 8 is not divisible by micro_batch_size 4 x ...");
  // Punctuation before the cut goes with it.
  EXPECT_EQ(shorten_at_word("one, two three", 6), "one ...");
  // A single word longer than the limit is cut, and says so.
  EXPECT_EQ(shorten_at_word("abcdefghij", 4), "abcd ...");
}

TEST(EscapeControl, OneLine) {
  EXPECT_EQ(escape_control("a\nb\tc\x01"), "a\\nb\\tc\\x01");
}

}  // namespace
}  // namespace cleave::one_line_test
