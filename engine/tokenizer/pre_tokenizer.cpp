// The pre-tokenizer scanners (see pre_tokenizer.hpp). Each alternative of the pattern is tried in order at
// `pos`, as the regex engine does; the comments quote the alternative a branch implements.
#include "engine/tokenizer/pre_tokenizer.hpp"

#include "engine/core/error.hpp"
#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer {
namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Char {
  CodeClass code_class;
  std::uint32_t bytes;
  char32_t value;
};

Char char_at(std::string_view text, std::size_t pos) {
  const CodePoint cp = decode_utf8(text, pos);
  return {code_class(cp.value), cp.bytes, cp.value};
}

// The end of the run of code points of class `c` starting at `pos` (pos itself may be the end).
std::size_t run_end(std::string_view text, std::size_t pos, CodeClass c) {
  while (pos < text.size()) {
    const auto b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) {  // ASCII without decoding: the common case
      if (code_class(b) != c) break;
      ++pos;
      continue;
    }
    const Char ch = char_at(text, pos);
    if (ch.code_class != c) break;
    pos += ch.bytes;
  }
  return pos;
}

bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

// \s+(?!\S)|\s+ at `pos` (a space): the whole run when it ends the text, else the run less its last code point
// when that leaves at least one (the lookahead must see a space), else the one space.
std::size_t space_run_end(std::string_view text, std::size_t pos) {
  std::size_t last = pos, end = pos;
  while (end < text.size()) {
    const Char ch = char_at(text, end);
    if (ch.code_class != CodeClass::kSpace) break;
    last = end;
    end += ch.bytes;
  }
  if (end == text.size()) return end;
  return last > pos ? last : end;
}

std::size_t gpt2_end(std::string_view text, std::size_t pos) {
  const std::size_t n = text.size();
  // 's|'t|'re|'ve|'m|'ll|'d
  if (text[pos] == '\'' && pos + 1 < n) {
    const char c = text[pos + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return pos + 2;
    if (pos + 2 < n && (((c == 'r' || c == 'v') && text[pos + 2] == 'e') || (c == 'l' && text[pos + 2] == 'l'))) {
      return pos + 3;
    }
  }
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': a literal space joins the run of the class that follows it.
  if (text[pos] == ' ' && pos + 1 < n) {
    const Char next = char_at(text, pos + 1);
    if (next.code_class != CodeClass::kSpace) return run_end(text, pos + 1 + next.bytes, next.code_class);
  }
  const Char first = char_at(text, pos);
  if (first.code_class != CodeClass::kSpace) return run_end(text, pos + first.bytes, first.code_class);
  // \s+(?!\S)|\s+
  return space_run_end(text, pos);
}

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::size_t llama3_end(std::string_view text, std::size_t pos) {
  const std::size_t n = text.size();
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): case-insensitive under Unicode case folding, where U+017F (long s) folds to s.
  if (text[pos] == '\'' && pos + 1 < n) {
    const char c = ascii_lower(text[pos + 1]);
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return pos + 2;
    if (pos + 2 < n) {
      const char e = ascii_lower(text[pos + 2]);
      if (((c == 'r' || c == 'v') && e == 'e') || (c == 'l' && e == 'l')) return pos + 3;
      if (text[pos + 1] == '\xC5' && text[pos + 2] == '\xBF') return pos + 3;  // 'ſ
    }
  }
  const Char first = char_at(text, pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (first.code_class == CodeClass::kLetter) return run_end(text, pos + first.bytes, CodeClass::kLetter);
  if (first.code_class != CodeClass::kNumber && !is_newline(first.value) && pos + first.bytes < n) {
    const Char next = char_at(text, pos + first.bytes);
    if (next.code_class == CodeClass::kLetter) {
      return run_end(text, pos + first.bytes + next.bytes, CodeClass::kLetter);
    }
  }
  // \p{N}{1,3}
  if (first.code_class == CodeClass::kNumber) {
    std::size_t end = pos + first.bytes;
    for (int k = 1; k < 3 && end < n; ++k) {
      const Char ch = char_at(text, end);
      if (ch.code_class != CodeClass::kNumber) break;
      end += ch.bytes;
    }
    return end;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  std::size_t others = n;  // where the run of others starts, if this alternative matches
  if (text[pos] == ' ' && pos + 1 < n && char_at(text, pos + 1).code_class == CodeClass::kOther) others = pos + 1;
  else if (first.code_class == CodeClass::kOther) others = pos;
  if (others < n) {
    std::size_t end = run_end(text, others, CodeClass::kOther);
    while (end < n && (text[end] == '\r' || text[end] == '\n')) ++end;
    return end;
  }
  // \s*[\r\n]+: the space run up to and including its last \r or \n.
  std::size_t end = pos, after_newline = pos;
  while (end < n) {
    const Char ch = char_at(text, end);
    if (ch.code_class != CodeClass::kSpace) break;
    end += ch.bytes;
    if (is_newline(ch.value)) after_newline = end;
  }
  if (after_newline > pos) return after_newline;
  // \s+(?!\S)|\s+
  return space_run_end(text, pos);
}

}  // namespace

std::string_view split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2: return "GPT-2";
    case SplitPattern::kLlama3: return "Llama 3";
  }
  return "?";
}

std::string_view pattern_text(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2: return kGpt2Pattern;
    case SplitPattern::kLlama3: return kLlama3Pattern;
  }
  return {};
}

std::optional<SplitPattern> recognise_pattern(std::string_view regex) {
  for (SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    if (regex == pattern_text(p)) return p;
  }
  return std::nullopt;
}

std::size_t pre_token_end(SplitPattern pattern, std::string_view text, std::size_t pos) {
  CLEAVE_ASSERT(pos < text.size(), "pre_token_end at {} of {} bytes", pos, text.size());
  switch (pattern) {
    case SplitPattern::kGpt2: return gpt2_end(text, pos);
    case SplitPattern::kLlama3: return llama3_end(text, pos);
  }
  CLEAVE_ASSERT(false, "pre_token_end: unknown SplitPattern {}", static_cast<int>(pattern));
  return text.size();
}

}  // namespace cleave::tokenizer
