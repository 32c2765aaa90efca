// SectionReader: reads one JSON object of a config (a section) into typed values. Every accessor registers its
// key as known; finish() records the keys present that nobody asked for, so unknown keys are found by reading,
// never by a second list of names. A missing key leaves the caller's default in place (the accessors return
// whether the key was present). Type and range errors throw through fail() (parse_state.hpp), naming the key path.
// Internal to engine/config.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/config/parse_state.hpp"
#include "engine/config/strict_json.hpp"

namespace cleave::config {

class SectionReader {
 public:
  // `object` null: the section is absent (every key reads as missing). A non-object is an error.
  SectionReader(const nlohmann::json* object, std::string path, ParseState& state);

  const std::string& path() const { return path_; }
  std::string key_path(std::string_view key) const { return join_path(path_, key); }
  // Where `key`'s value came from: "--set a.b=v" or "config FILE" (ParseState::where).
  std::string where(std::string_view key) const { return state_.where(key_path(key)); }

  // The value of `key`, or null when absent; registers the key as known either way.
  const nlohmann::json* get(std::string_view key);
  bool has(std::string_view key) const { return object_ != nullptr && object_->contains(key); }

  SectionReader section(std::string_view key) { return SectionReader(get(key), key_path(key), state_); }

  bool integer(std::string_view key, std::int64_t& out, std::int64_t min,
               std::int64_t max = std::numeric_limits<std::int64_t>::max());
  bool integer(std::string_view key, int& out, int min, int max = std::numeric_limits<int>::max());
  bool unsigned_integer(std::string_view key, std::uint64_t& out);
  // A number in [min, max] (min_open, max_open: strictly above min, below max).
  bool number(std::string_view key, double& out, double min, double max = std::numeric_limits<double>::infinity(),
              bool min_open = false, bool max_open = false);
  bool boolean(std::string_view key, bool& out);
  // A string; a --set value that parsed as a JSON scalar is taken as the text typed (--set data.path=123).
  bool string(std::string_view key, std::string& out);
  // An enum-valued key: the text is parsed here, once, against the enum's name table.
  template <NamedEnum E>
  bool choice(std::string_view key, E& out) {
    std::string text;
    if (!string(key, text)) return false;
    try {
      out = parse_enum<E>(text, key_path(key));
    } catch (const ConfigKeyError& e) {
      fail(state_, e.key(), "{}", e.detail());
    }
    return true;
  }
  bool integer_list(std::string_view key, std::vector<std::int64_t>& out, std::int64_t min, std::int64_t max);
  // An array of strings; a lone string is a list of one (--set data.paths=a.bin).
  bool string_list(std::string_view key, std::vector<std::string>& out);
  bool number_list(std::string_view key, std::vector<double>& out, double min, double max);
  // Two numbers, each in [min, max).
  bool number_pair(std::string_view key, std::array<double, 2>& out, double min, double max);
  // A byte count: a non-negative integer or a string like "512MiB" (parse_bytes).
  bool bytes(std::string_view key, std::int64_t& out);

  // Records keys present but never asked for. `foreign` maps keys that belong elsewhere to an explanation.
  void finish(const std::map<std::string, std::string>& foreign = {});

 private:
  std::int64_t to_integer(const nlohmann::json& v, const std::string& path) const;
  double to_number(const nlohmann::json& v, const std::string& path) const;
  void check_integer_range(const std::string& path, std::int64_t value, std::int64_t min, std::int64_t max) const;
  void check_range(const std::string& path, double value, double min, double max, bool min_open,
                   bool max_open) const;

  const nlohmann::json* object_;
  std::string path_;
  ParseState& state_;
  std::set<std::string> asked_;
};

}  // namespace cleave::config
