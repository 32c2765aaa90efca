// ParseState: what the config readers share while one config is read: where the text came from, which keys
// --set overrode, the key paths a reader asked for and those present that none asked for. fail() is the one
// error every reader throws: one line naming where the key came from (the file or the --set argument), the key
// path and the problem. Internal to engine/config (config.cpp and the files it is made of).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::config {

// Short rendering of a JSON value for "got ..." in messages.
inline std::string show_value(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

struct ParseState {
  std::string origin;
  std::map<std::string, std::string> set_assignments;  // key path -> "key=value" as typed
  std::set<std::string> known;                         // every key path a reader asked for
  std::vector<std::string> unknown;                    // key paths present but never asked for
  std::map<std::string, std::string> unknown_notes;    // path -> extra explanation

  // "--set a.b=v" when `path` (or a parent of it, or the array an element path "a.b[2]" is in) was overridden on
  // the command line, else the file.
  std::string where(const std::string& path) const {
    for (const auto& [key, assignment] : set_assignments) {
      if (key == path || key.starts_with(path + ".") || path.starts_with(key + ".") || path.starts_with(key + "[")) {
        return "--set " + assignment;
      }
    }
    return "config " + origin;
  }
  // The text after '=' when `path` was set with --set (before it was parsed as JSON).
  std::optional<std::string> raw_override(const std::string& path) const {
    auto it = set_assignments.find(path);
    if (it == set_assignments.end()) return std::nullopt;
    return it->second.substr(it->second.find('=') + 1);
  }
};

template <typename... Args>
[[noreturn]] void fail(const ParseState& state, const std::string& path, fmt::format_string<Args...> format,
                       Args&&... args) {
  throw Error(fmt::format("{}: {}: {}", state.where(path), path, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace cleave::config
