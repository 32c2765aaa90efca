// Counts and articles in messages (english.hpp).
#include "engine/core/english.hpp"

#include <cctype>

#include <fmt/format.h>

namespace cleave {
namespace {

bool is_vowel(char c) {
  const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l == 'a' || l == 'e' || l == 'i' || l == 'o' || l == 'u';
}

bool is_initialism(std::string_view name) {
  if (name == "moe" || name == "MoE") return true;
  for (std::size_t i = 1; i < name.size(); ++i) {
    if (is_vowel(name[i])) return false;
  }
  return true;
}

}  // namespace

std::string count_of(std::int64_t n, std::string_view noun, std::string_view plural) {
  if (n == 1) return fmt::format("1 {}", noun);
  return plural.empty() ? fmt::format("{} {}s", n, noun) : fmt::format("{} {}", n, plural);
}

std::string with_article(std::string_view name) {
  if (name.empty()) return "a";
  const char first = static_cast<char>(std::tolower(static_cast<unsigned char>(name.front())));
  bool an = false;
  if (is_initialism(name)) {
    an = std::string_view("aefhilmnorsx").find(first) != std::string_view::npos;
  } else {
    an = is_vowel(first);
  }
  return fmt::format("{} {}", an ? "an" : "a", name);
}

}  // namespace cleave
