// Enum name tables: the one place an enum value's text lives (config keys, JSON files, messages).
//
// An enum opts in by declaring, next to it and in its namespace, a constexpr function found by ADL:
//   constexpr std::array<EnumName<Recompute>, 3> enum_names(Recompute) {
//     return {{{Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}}};
//   }
// Then enum_name(value) gives its text, enum_from_name<E>(text) the value (nullopt when unknown),
// parse_enum<E>(text, key) the value or a ConfigKeyError on `key` that lists the allowed names (and the
// closest one; an enum that declares `std::string enum_refusal(E, std::string_view text)` beside its table words
// that error itself), and fmt prints the value as its name, so messages read as they did when these were strings.
// Invariant: every value of the enum appears once in its table and no two values share a name (the unit test
// tests/unit/config/enums_test.cpp round-trips every table).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "engine/core/edit_distance.hpp"
#include "engine/core/error.hpp"

namespace cleave {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) { enum_names(e); };

// An enum that words its own refusal of an unknown name (what each value means, say), found by ADL.
template <typename E>
concept RefusalWorded = requires(E e, std::string_view text) {
  { enum_refusal(e, text) } -> std::convertible_to<std::string>;
};

template <NamedEnum E>
constexpr auto enum_table() {
  return enum_names(E{});
}

template <NamedEnum E>
constexpr std::string_view enum_name(E value) {
  for (const auto& entry : enum_table<E>()) {
    if (entry.value == value) return entry.name;
  }
  return "?";  // only for a value cast from an out-of-range integer
}

template <NamedEnum E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& entry : enum_table<E>()) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

// "\"gpt\", \"mlp\", \"cnn\"": the allowed names in table order, for messages.
template <NamedEnum E>
std::string enum_choices() {
  std::string list;
  for (const auto& entry : enum_table<E>()) list += (list.empty() ? "\"" : ", \"") + std::string(entry.name) + "\"";
  return list;
}

// The closest allowed name within an edit distance of 2, or "".
template <NamedEnum E>
std::string_view enum_closest(std::string_view text) {
  std::string_view closest;
  std::size_t best = std::numeric_limits<std::size_t>::max();
  for (const auto& entry : enum_table<E>()) {
    if (const std::size_t d = edit_distance(text, entry.name); d < best) best = d, closest = entry.name;
  }
  return best <= 2 ? closest : std::string_view();
}

// The value named `text`; otherwise a ConfigKeyError on `key`: the enum's enum_refusal when it has one, else
// "\"rnn\" is not one of \"gpt\", \"mlp\", \"cnn\"" plus " (did you mean \"adamw\"?)" for a near miss.
template <NamedEnum E>
E parse_enum(std::string_view text, std::string_view key) {
  if (const auto value = enum_from_name<E>(text)) return *value;
  if constexpr (RefusalWorded<E>) throw ConfigKeyError(std::string(key), enum_refusal(E{}, text));
  const std::string_view closest = enum_closest<E>(text);
  throw ConfigKeyError(std::string(key), fmt::format("\"{}\" is not one of {}{}", text, enum_choices<E>(),
                                                     closest.empty() ? std::string()
                                                                     : fmt::format(" (did you mean \"{}\"?)", closest)));
}

}  // namespace cleave

// fmt prints a named enum as its name.
template <cleave::NamedEnum E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
  template <typename FormatContext>
  auto format(E value, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(cleave::enum_name(value), ctx);
  }
};
