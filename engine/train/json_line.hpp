// JsonLine: one flat JSON object of numbers ({"key":value,...}, no spaces) built in a buffer the writer keeps, for the
// metrics row written every step (metrics.hpp).
//
// Invariant: the text is byte for byte what nlohmann::ordered_json's dump() makes of the same fields added in the
// same order (the format metrics.jsonl had): integers in decimal, finite doubles in nlohmann's shortest round-trip
// form (its own to_chars: "0.0003", "3.0", "1e-05", "1.5e+20"), a non-finite double as null, keys escaped as dump()
// escapes them. Keys are not checked for repeats (ordered_json would keep one, at the first's place): callers add
// distinct names. begin() reserves room for the longest text its fields can make (every value at its longest), so a
// row of no more fields and key bytes than an earlier one allocates nothing, whatever its numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cleave::train {

class JsonLine {
 public:
  // The longest text one value can take: nlohmann's to_chars writes at most 24 characters ("-1.2345678901234567e-308"),
  // an integer 20, null 4.
  static constexpr std::size_t kMaxValueChars = 32;
  // Starts a new object ("{") with room for `fields` fields whose keys total at most `key_bytes` bytes; the buffer
  // keeps its capacity (a smaller row reserves nothing).
  void begin(std::size_t fields, std::size_t key_bytes);
  void add(std::string_view key, std::int64_t value);
  void add(std::string_view key, double value);  // null when not finite (JSON has no NaN)
  // Closes the object ("}" and a newline when `newline`) and returns the text, valid until the next begin().
  std::string_view end(bool newline = true);
  // Whether the fields added since begin() kept to the room it reserved (no more fields, no more key bytes): a caller
  // that promises a row allocates nothing checks its reservation with it.
  bool within_room() const { return fields_ <= room_fields_ && key_bytes_ <= room_key_bytes_; }

 private:
  void key(std::string_view name);

  std::string text_;
  bool first_ = true;
  std::size_t room_fields_ = 0, room_key_bytes_ = 0;  // begin()'s
  std::size_t fields_ = 0, key_bytes_ = 0;            // added since

};

}  // namespace cleave::train
