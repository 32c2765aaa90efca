// The generated code-point class table and the UTF-8 checks: the table is sorted and disjoint, spot checks
// of each class in several scripts (values from Python's unicodedata), and invalid UTF-8 of every kind.
#include <gtest/gtest.h>

#include <string>

#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer::unicode_classes_test {
namespace {

TEST(UnicodeClasses, TableIsSortedAndDisjoint) {
  ASSERT_GT(kCodeRangeCount, 500u);
  EXPECT_STREQ(kUnicodeVersion, "14.0.0");
  for (std::size_t i = 0; i < kCodeRangeCount; ++i) {
    EXPECT_LE(kCodeRanges[i].first, kCodeRanges[i].last) << i;
    if (i > 0) {
      EXPECT_LT(kCodeRanges[i - 1].last, kCodeRanges[i].first) << i;
    }
    EXPECT_NE(kCodeRanges[i].code_class, CodeClass::kOther) << i;
  }
}

TEST(UnicodeClasses, SpotChecks) {
  const struct {
    char32_t cp;
    CodeClass expected;
  } checks[] = {
      {'a', CodeClass::kLetter},    {'Z', CodeClass::kLetter},    {'5', CodeClass::kNumber},
      {' ', CodeClass::kSpace},     {'\t', CodeClass::kSpace},    {'\r', CodeClass::kSpace},
      {'\'', CodeClass::kOther},    {'_', CodeClass::kOther},     {0x7F, CodeClass::kOther},
      {0x85, CodeClass::kSpace},    {0xA0, CodeClass::kSpace},    {0xAA, CodeClass::kLetter},  // ª Lo
      {0xB2, CodeClass::kNumber},   {0xBD, CodeClass::kNumber},   {0xE9, CodeClass::kLetter},  // ² ½ é
      {0x17F, CodeClass::kLetter},  {0x301, CodeClass::kOther},   {0x3A9, CodeClass::kLetter},  // ſ, combining, Ω
      {0x416, CodeClass::kLetter},  {0x663, CodeClass::kNumber},  {0x1680, CodeClass::kSpace},  // Ж ٣
      {0x180E, CodeClass::kOther},  {0x2009, CodeClass::kSpace},  {0x200B, CodeClass::kOther},  // U+180E left \s
      {0x2028, CodeClass::kSpace},  {0x216B, CodeClass::kNumber}, {0x3000, CodeClass::kSpace},  // Ⅻ Nl
      {0x3042, CodeClass::kLetter}, {0x30FC, CodeClass::kLetter}, {0x4E2D, CodeClass::kLetter},  // あ ー(Lm) 中
      {0xAC00, CodeClass::kLetter}, {0xFEFF, CodeClass::kOther},  {0x1D400, CodeClass::kLetter},
      {0x1F600, CodeClass::kOther}, {0x10FFFF, CodeClass::kOther}, {0x30000, CodeClass::kLetter},  // CJK ext G
  };
  for (const auto& c : checks) EXPECT_EQ(code_class(c.cp), c.expected) << std::hex << "U+" << static_cast<unsigned>(c.cp);
}

TEST(UnicodeClasses, Utf8RoundTripAndInvalidSequences) {
  for (char32_t cp : {U'\0', U'a', U'\x7F', U'\x80', U'\x7FF', U'\x800', U'\xFFFF', U'\x10000', U'\x10FFFF'}) {
    std::string s;
    append_utf8(cp, s);
    ASSERT_EQ(first_invalid_utf8(s), s.size()) << static_cast<unsigned>(cp);
    EXPECT_EQ(decode_utf8(s, 0).value, cp);
    EXPECT_EQ(decode_utf8(s, 0).bytes, s.size());
  }
  const struct {
    std::string text;
    std::size_t bad;
  } invalid[] = {
      {"ab\x80", 2},              // lone continuation byte
      {"\xC0\xAF", 0},            // overlong '/'
      {"x\xE0\x80\xAF", 1},       // overlong, 3 bytes
      {"\xED\xA0\x80", 0},        // surrogate U+D800
      {"\xF4\x90\x80\x80", 0},    // above U+10FFFF
      {"ok\xE2\x82", 2},          // truncated at the end
      {"\xC3(", 0},               // bad continuation
      {"\xFF", 0},
  };
  for (const auto& c : invalid) EXPECT_EQ(first_invalid_utf8(c.text), c.bad) << c.bad;
}

// What `cleave generate` prints: a sampled byte token can end mid-character; each maximal invalid subpart is one
// U+FFFD, as tokenizers' decode gives (Rust's from_utf8_lossy on the same bytes).
TEST(UnicodeClasses, LossyUtf8ReplacesEachMaximalInvalidSubpart) {
  const std::string r = "\xEF\xBF\xBD";
  const struct {
    std::string text, want;
  } cases[] = {
      {"h\xC3\xA9llo \xF0\x9F\x98\x80", "h\xC3\xA9llo \xF0\x9F\x98\x80"},  // valid: unchanged
      {"ab\x80", "ab" + r},
      {"\xC0\xAF", r + r},                          // C0 starts nothing; AF is a lone continuation
      {"x\xE0\x80\xAF", "x" + r + r + r},          // E0 needs A0..BF next
      {"\xED\xA0\x80", r + r + r},                 // surrogate: ED needs 80..9F next
      {"\xF4\x90\x80\x80", r + r + r + r},        // above U+10FFFF: F4 needs 80..8F next
      {"ok\xE2\x82", "ok" + r},                     // a truncated sequence is one subpart
      {"\xF0\x9F\x98x\xC3(", r + "x" + r + "("},
      {"\xFF", r},
      {"", ""},
  };
  for (const auto& c : cases) EXPECT_EQ(lossy_utf8(c.text), c.want) << c.text;
}

}  // namespace
}  // namespace cleave::tokenizer::unicode_classes_test
