// --set overrides on the config's JSON tree: see set_override.hpp.
#include "engine/config/set_override.hpp"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <vector>

#include "engine/config/strict_json.hpp"

namespace cleave::config {
namespace {
using json = nlohmann::json;
}  // namespace

void apply_set_override(json& root, const std::string& assignment, ParseState& state) {
  if (const std::size_t bad = invalid_utf8_at(assignment); bad != std::string_view::npos) {
    throw Error(fmt::format("--set {}...: not valid UTF-8 (byte 0x{:02X} at offset {}); keys and values must be UTF-8 "
                            "text", assignment.substr(0, bad), static_cast<unsigned char>(assignment[bad]), bad));
  }
  const auto eq = assignment.find('=');
  CLEAVE_CHECK(eq != std::string::npos && eq > 0, "--set {}: expected key.path=value, e.g. --set optimizer.lr=3e-4",
               assignment);
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  json value;
  try {
    value = parse_json_strict(text, "--set " + assignment);
  } catch (const Error& e) {
    if (std::string_view(e.what()).find("duplicate key") != std::string_view::npos) throw;
    value = text;  // not JSON: take it as a string
  }
  std::vector<std::string> parts;
  std::stringstream stream(key);
  for (std::string part; std::getline(stream, part, '.');) parts.push_back(part);
  const bool empty_part = std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); });
  CLEAVE_CHECK(!parts.empty() && !empty_part && key.back() != '.',
               "--set {}: key path '{}' has an empty component; expected e.g. optimizer.lr", assignment, key);
  json* node = &root;
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    walked = join_path(walked, parts[i]);
    json& child = (*node)[parts[i]];
    if (child.is_null()) child = json::object();
    CLEAVE_CHECK(child.is_object(), "--set {}: {} is not a section (it holds {})", assignment, walked, show_value(child));
    node = &child;
  }
  (*node)[parts.back()] = std::move(value);
  state.set_assignments[key] = assignment;
}

}  // namespace cleave::config
