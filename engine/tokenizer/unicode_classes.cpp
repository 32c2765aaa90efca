// Code-point classification and UTF-8 checks (see unicode_classes.hpp).
#include "engine/tokenizer/unicode_classes.hpp"

#include <algorithm>
#include <string>

namespace cleave::tokenizer {

CodeClass code_class_above_ascii(char32_t cp) {
  const CodeRange* end = kCodeRanges + kCodeRangeCount;
  const CodeRange* it = std::upper_bound(kCodeRanges, end, cp, [](char32_t v, const CodeRange& r) { return v < r.first; });
  if (it == kCodeRanges) return CodeClass::kOther;
  --it;
  return cp <= it->last ? it->code_class : CodeClass::kOther;
}

namespace {

// The bytes of the invalid subpart that starts at text[i] (first_invalid_utf8 found it): its lead byte and the
// continuation bytes that still fit a sequence that lead starts (Unicode's table of well-formed UTF-8).
std::size_t invalid_subpart(std::string_view text, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) len = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
  else if (b0 >= 0xF0 && b0 <= 0xF4) len = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
  std::size_t k = 1;
  for (; k < len && i + k < text.size(); ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
  }
  return k;
}

}  // namespace

std::string lossy_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const std::size_t bad = first_invalid_utf8(text);
    out.append(text.substr(0, bad));
    if (bad == text.size()) break;
    out.append("\xEF\xBF\xBD");  // U+FFFD
    text.remove_prefix(bad + invalid_subpart(text, bad));
  }
  return out;
}

std::size_t first_invalid_utf8(std::string_view text) {
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    char32_t min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) len = 2, min = 0x80;
    else if (b0 >= 0xE0 && b0 <= 0xEF) len = 3, min = 0x800;
    else if (b0 >= 0xF0 && b0 <= 0xF4) len = 4, min = 0x10000;
    else return i;
    if (i + len > n) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return i;
    }
    const char32_t cp = decode_utf8(text, i).value;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return n;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace cleave::tokenizer
