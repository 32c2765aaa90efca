// Code-point classes for the pre-tokenizer scanners, and UTF-8 decoding.
//
// The classes are those the Hugging Face `tokenizers` patterns use: \p{L} (kLetter), \p{N} (kNumber), \s
// (kSpace, the White_Space property) and everything else (kOther). They come from a generated range table
// (unicode_table.cpp, written by scripts/gen_unicode_classes.py from Python's unicodedata; kUnicodeVersion
// names the Unicode version). To move to a newer Unicode, rerun the script and commit its output.
//
// Invariant: code_class() is a pure function of the code point; the table is sorted and disjoint.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cleave::tokenizer {

enum class CodeClass : std::uint8_t { kOther, kLetter, kNumber, kSpace };

struct CodeRange {
  char32_t first;
  char32_t last;
  CodeClass code_class;
};
extern const CodeRange kCodeRanges[];
extern const std::size_t kCodeRangeCount;
extern const char kUnicodeVersion[];  // "14.0.0"

// Code points above ASCII: a binary search of the table.
CodeClass code_class_above_ascii(char32_t cp);

inline constexpr auto kAsciiClasses = [] {
  std::array<CodeClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) classes[c] = CodeClass::kLetter;
    else if (c >= '0' && c <= '9') classes[c] = CodeClass::kNumber;
    else if (c == ' ' || (c >= '\t' && c <= '\r')) classes[c] = CodeClass::kSpace;
    else classes[c] = CodeClass::kOther;
  }
  return classes;
}();

inline CodeClass code_class(char32_t cp) { return cp < 0x80 ? kAsciiClasses[cp] : code_class_above_ascii(cp); }

// One decoded code point of valid UTF-8: the value and its length in bytes (1-4).
struct CodePoint {
  char32_t value;
  std::uint32_t bytes;
};

// Decodes the code point starting at text[pos]. The text must be valid UTF-8 (see first_invalid_utf8).
inline CodePoint decode_utf8(std::string_view text, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) return {b0, 1};
  const auto b = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i]) & 0x3F); };
  if (b0 < 0xE0) return {(static_cast<char32_t>(b0 & 0x1F) << 6) | b(1), 2};
  if (b0 < 0xF0) return {(static_cast<char32_t>(b0 & 0x0F) << 12) | (b(1) << 6) | b(2), 3};
  return {(static_cast<char32_t>(b0 & 0x07) << 18) | (b(1) << 12) | (b(2) << 6) | b(3), 4};
}

// The byte offset of the first byte that is not part of valid UTF-8 (overlong forms, surrogates, code
// points above U+10FFFF and truncated sequences are invalid), or text.size() when all of it is valid.
std::size_t first_invalid_utf8(std::string_view text);

// `text` with every maximal invalid subpart (a byte that starts no sequence, or the valid start of a truncated
// one) replaced by U+FFFD, as Unicode's "substitution of maximal subparts" and tokenizers' decode (Rust's
// from_utf8_lossy) do; valid text is returned unchanged.
std::string lossy_utf8(std::string_view text);

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value) to `out`.
void append_utf8(char32_t cp, std::string& out);

}  // namespace cleave::tokenizer
