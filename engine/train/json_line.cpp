// JsonLine (json_line.hpp): numbers through the same formatters nlohmann's serializer calls (std::to_chars for
// integers as its dump_integer writes them, nlohmann::detail::to_chars for doubles), into fixed buffers.
#include "engine/train/json_line.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace cleave::train {

void JsonLine::begin(std::size_t fields, std::size_t key_bytes) {
  text_.clear();
  // Per field a comma, two quotes, a colon, the key escaped (at most 6 bytes a byte: \u00xx) and the value; then
  // the braces and the newline.
  text_.reserve(fields * (4 + kMaxValueChars) + 6 * key_bytes + 3);
  text_ += '{';
  first_ = true;
  room_fields_ = fields, room_key_bytes_ = key_bytes;
  fields_ = key_bytes_ = 0;
}

// As nlohmann's dump_escaped with ensure_ascii off: the two-character escapes, other control characters as \u00xx,
// every other byte as it is.
void JsonLine::key(std::string_view name) {
  if (!first_) text_ += ',';
  first_ = false;
  ++fields_;
  key_bytes_ += name.size();
  text_ += '"';
  for (const char c : name) {
    switch (c) {
      case '"': text_ += "\\\""; break;
      case '\\': text_ += "\\\\"; break;
      case '\b': text_ += "\\b"; break;
      case '\f': text_ += "\\f"; break;
      case '\n': text_ += "\\n"; break;
      case '\r': text_ += "\\r"; break;
      case '\t': text_ += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          std::array<char, 8> hex{};
          std::snprintf(hex.data(), hex.size(), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          text_ += hex.data();
        } else {
          text_ += c;
        }
    }
  }
  text_ += "\":";
}

void JsonLine::add(std::string_view name, std::int64_t value) {
  key(name);
  std::array<char, 24> digits{};
  const std::to_chars_result written = std::to_chars(digits.data(), digits.data() + digits.size(), value);
  text_.append(digits.data(), static_cast<std::size_t>(written.ptr - digits.data()));
}

void JsonLine::add(std::string_view name, double value) {
  key(name);
  if (!std::isfinite(value)) {
    text_ += "null";
    return;
  }
  std::array<char, 64> digits{};  // nlohmann's serializer's number buffer
  char* const end = nlohmann::detail::to_chars(digits.data(), digits.data() + digits.size(), value);
  text_.append(digits.data(), static_cast<std::size_t>(end - digits.data()));
}

std::string_view JsonLine::end(bool newline) {
  text_ += '}';
  if (newline) text_ += '\n';
  return text_;
}

}  // namespace cleave::train
