// Strict JSON text for the config reader: duplicate keys are errors (nlohmann keeps the last silently),
// malformed text names line and column, and --set text is checked to be UTF-8 before it becomes a JSON string.
// Every failure is one cleave::Error line naming `what` (the file or the --set argument).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace cleave::config {

// Parses strict JSON; a key repeated within one object is an error naming its path.
nlohmann::json parse_json_strict(std::string_view text, const std::string& what);

// Offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, no surrogates, at most
// U+10FFFF), or npos.
std::size_t invalid_utf8_at(std::string_view text);

// A key path: `key` under `parent` ("optimizer" and "lr" give "optimizer.lr"; an empty parent gives "lr").
std::string join_path(const std::string& parent, std::string_view key);

}  // namespace cleave::config
