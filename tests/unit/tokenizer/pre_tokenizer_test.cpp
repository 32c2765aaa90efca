// The GPT-2 and Llama 3 pre-tokenizer scanners on awkward text: contractions in both cases, digit runs,
// letters of several scripts, CJK, emoji, combining marks, trailing and leading spaces, tabs, \r\n, U+00A0,
// U+3000 and the long s. Every expected split was produced by `tokenizers` 0.23.3 (Split(Regex(pattern),
// "isolated").pre_tokenize_str) and is written out here, so the test needs no download.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/tokenizer/pre_tokenizer.hpp"
#include "unit/tokenizer/tiny_tokenizer.hpp"

namespace cleave::tokenizer::pre_tokenizer_test {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(SplitPattern pattern, const std::string& text) {
  Pieces out;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = pre_token_end(pattern, text, pos);
    EXPECT_GT(end, pos);
    EXPECT_LE(end, text.size());
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

struct Case {
  std::string text;
  Pieces gpt2;
  Pieces llama3;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"Hello world", {"Hello", " world"}, {"Hello", " world"}},
      {"I'm don't we'RE", {"I", "'m", " don", "'t", " we", "'", "RE"}, {"I", "'m", " don", "'t", " we", "'RE"}},
      {"abc123def", {"abc", "123", "def"}, {"abc", "123", "def"}},
      {"  hello", {" ", " hello"}, {" ", " hello"}},
      {"hello   ", {"hello", "   "}, {"hello", "   "}},
      {"a \t\nb", {"a", " \t", "\n", "b"}, {"a", " \t\n", "b"}},
      {"日本語 テキスト", {"日本語", " テキスト"}, {"日本語", " テキスト"}},
      {"😀😀 x", {"😀😀", " x"}, {"😀😀", " x"}},
      {"x\r\ny", {"x", "\r", "\n", "y"}, {"x", "\r\n", "y"}},
      {"I'M 12345 don'T", {"I", "'", "M", " 12345", " don", "'", "T"}, {"I", "'M", " ", "123", "45", " don", "'T"}},
      {"x\r\n\r\ny", {"x", "\r\n\r", "\n", "y"}, {"x", "\r\n\r\n", "y"}},
      {"a  \n  b", {"a", "  \n ", " b"}, {"a", "  \n", " ", " b"}},
      {"...hello", {"...", "hello"}, {"...", "hello"}},
      {"\"quoted\"", {"\"", "quoted", "\""}, {"\"quoted", "\""}},
      {"Ελληνικά, кириллица", {"Ελληνικά", ",", " кириллица"}, {"Ελληνικά", ",", " кириллица"}},
      {"hello!!\n\nworld", {"hello", "!!", "\n", "\n", "world"}, {"hello", "!!\n\n", "world"}},
      {"'ſ", {"'", "ſ"}, {"'ſ"}},
      {"'ſx", {"'", "ſx"}, {"'ſ", "x"}},
      {"x\u00a0y \u3000z", {"x", "\u00a0", "y", " ", "\u3000", "z"}, {"x", "\u00a0y", " ", "\u3000z"}},
      {"½²³ 4567", {"½²³", " 4567"}, {"½²³", " ", "456", "7"}},
      {"it's'll''s", {"it", "'s", "'ll", "''", "s"}, {"it", "'s", "'ll", "''", "s"}},
      {" ' s", {" '", " s"}, {" '", " s"}},
      {"e\u0301t\u00e9", {"e", "\u0301", "t\u00e9"}, {"e", "\u0301t\u00e9"}},
      {"\t\tx", {"\t", "\t", "x"}, {"\t", "\tx"}},
  };
  return all;
}

TEST(PreTokenizer, Gpt2PatternMatchesTokenizers) {
  for (const Case& c : cases()) EXPECT_EQ(split(SplitPattern::kGpt2, c.text), c.gpt2) << c.text;
}

TEST(PreTokenizer, Llama3PatternMatchesTokenizers) {
  for (const Case& c : cases()) EXPECT_EQ(split(SplitPattern::kLlama3, c.text), c.llama3) << c.text;
}

TEST(PreTokenizer, SingleCharactersAndEndsOfText) {
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    for (const char* one : {" ", "\n", "'", "a", "7", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}) {
      EXPECT_EQ(split(p, one), Pieces{one}) << split_pattern_name(p) << " '" << one << "'";
    }
    EXPECT_EQ(split(p, "x "), (Pieces{"x", " "}));
  }
}

TEST(PreTokenizer, RecognisesExactlyTheTwoPatterns) {
  EXPECT_EQ(recognise_pattern(testing::gpt2_regex()), SplitPattern::kGpt2);
  EXPECT_EQ(recognise_pattern(testing::llama3_regex()), SplitPattern::kLlama3);
  EXPECT_FALSE(recognise_pattern(std::string(testing::gpt2_regex()) + "|x").has_value());
  EXPECT_FALSE(recognise_pattern(R"(\w+|[^\w\s]+)").has_value());
  EXPECT_FALSE(recognise_pattern("").has_value());
}

}  // namespace
}  // namespace cleave::tokenizer::pre_tokenizer_test
