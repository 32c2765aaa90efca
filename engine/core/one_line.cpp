// One-line error messages (one_line.hpp).
#include "engine/core/one_line.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace cleave {

std::string escape_control(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (byte < 0x20 || byte == 0x7f) out += fmt::format("\\x{:02x}", byte);
    else out += c;
  }
  return out;
}

std::string shorten_at_word(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  std::size_t cut = text.rfind(' ', limit);
  if (cut == std::string_view::npos || cut == 0) cut = limit;  // one long word: cut it, but say so
  while (cut > 0 && (text[cut - 1] == ',' || text[cut - 1] == ';' || text[cut - 1] == ':' || text[cut - 1] == ' ')) {
    --cut;
  }
  return std::string(text.substr(0, cut)) + " ...";
}

void rethrow_one_line(const Error& error) {
  const std::string_view message = error.what();
  const bool clean = std::none_of(message.begin(), message.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
  });
  if (clean) throw;  // the Error being handled, its type kept
  throw Error(escape_control(message));
}

}  // namespace cleave
