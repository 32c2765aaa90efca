// The byte-level alphabet (see byte_level.hpp).
#include "engine/tokenizer/byte_level.hpp"

#include "engine/tokenizer/unicode_classes.hpp"

namespace cleave::tokenizer {

ByteLevelAlphabet::ByteLevelAlphabet() {
  to_byte_.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    to_code_point_[b] = cp;
    to_byte_[cp] = static_cast<std::int16_t>(b);
  }
}

std::optional<std::uint8_t> ByteLevelAlphabet::byte(char32_t cp) const {
  if (cp >= to_byte_.size() || to_byte_[cp] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(to_byte_[cp]);
}

std::optional<std::string> ByteLevelAlphabet::to_bytes(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    const CodePoint cp = decode_utf8(token, i);
    const auto b = byte(cp.value);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
    i += cp.bytes;
  }
  return out;
}

std::string ByteLevelAlphabet::to_token(std::string_view bytes) const {
  std::string out;
  for (unsigned char b : bytes) append_utf8(to_code_point_[b], out);
  return out;
}

}  // namespace cleave::tokenizer
