// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable code point, so a BPE
// vocabulary of strings covers every byte sequence (openai/gpt-2 encoder.py bytes_to_unicode, which
// Hugging Face `tokenizers` ByteLevel copies).
//
// Invariant: byte_to_code_point is a bijection between the bytes and its 256 code points: printable
// Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 for U+0100 + k in byte
// order (space 0x20 is 'Ġ' U+0120, '\n' is 'Ċ' U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cleave::tokenizer {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  // The byte a code point stands for, if it is one of the 256.
  std::optional<std::uint8_t> byte(char32_t cp) const;
  // A vocabulary string (UTF-8 of alphabet code points) back to its bytes; nullopt when a code point of it is
  // not in the alphabet (an added token such as "<|endoftext|>" is in it: its characters stand for themselves).
  std::optional<std::string> to_bytes(std::string_view token) const;
  // Raw bytes to the vocabulary string.
  std::string to_token(std::string_view bytes) const;

 private:
  std::array<char32_t, 256> to_code_point_{};
  std::array<std::int16_t, 324> to_byte_{};  // code points 0..323; -1 when not in the alphabet
};

}  // namespace cleave::tokenizer
