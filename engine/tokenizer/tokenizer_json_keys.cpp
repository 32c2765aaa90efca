// The key readers every section of tokenizer.json uses (tokenizer_json_parts.hpp). Invariant: a missing or
// mistyped key is one Error naming the file, the key and the value it holds.
#include "engine/tokenizer/tokenizer_json_parts.hpp"

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::tokenizer::json_parts {

std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 120) text = text.substr(0, 117) + "...";
  return text;
}

// An optional boolean key: its value, `fallback` when absent or null.
bool flag(const json& object, const char* key, bool fallback, const std::string& where, const std::string& source) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  CLEAVE_CHECK(it->is_boolean(), "{}: {}.{} is {}; expected true or false", source, where, key, shown(*it));
  return it->get<bool>();
}

const json& member(const json& object, const char* key, const std::string& where, const std::string& source) {
  const auto it = object.find(key);
  CLEAVE_CHECK(it != object.end(), "{}: {} has no \"{}\" key. {}", source, where, key, kSupported);
  return *it;
}

std::string type_of(const json& object, const std::string& where, const std::string& source) {
  CLEAVE_CHECK(object.is_object(), "{}: {} is {}; expected an object. {}", source, where, shown(object), kSupported);
  const json& type = member(object, "type", where, source);
  CLEAVE_CHECK(type.is_string(), "{}: {}.type is {}; expected a string. {}", source, where, shown(type), kSupported);
  return type.get<std::string>();
}

}  // namespace cleave::tokenizer::json_parts
