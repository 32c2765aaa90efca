// Keys: one Hugging Face config.json (or Cleave model section) being read, with typed getters whose every
// message names the file and the key. Shared by hf_config.cpp and the architectures (engine/hf/families/).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"

namespace cleave::hf {

// One config.json (or model section) being read; every message names `origin_` and the key.
class Keys {
 public:
  Keys(const nlohmann::json& doc, std::string origin) : doc_(doc), origin_(std::move(origin)) {}

  const nlohmann::json* find(const std::string& key) const {
    auto it = doc_.find(key);
    return it == doc_.end() || it->is_null() ? nullptr : &*it;
  }
  std::int64_t size(const std::string& key) const {
    const nlohmann::json* v = find(key);
    CLEAVE_CHECK(v != nullptr, "{}: {} is missing (a size every model of this architecture needs)", origin_, key);
    return positive(key, *v);
  }
  std::int64_t size_or(const std::string& key, std::int64_t fallback) const {
    const nlohmann::json* v = find(key);
    return v == nullptr ? fallback : positive(key, *v);
  }
  double number_or(const std::string& key, double fallback) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return fallback;
    CLEAVE_CHECK(v->is_number(), "{}: {} must be a number, got {}", origin_, key, v->dump());
    return v->get<double>();
  }
  bool flag_or(const std::string& key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return fallback;
    CLEAVE_CHECK(v->is_boolean(), "{}: {} must be true or false, got {}", origin_, key, v->dump());
    return v->get<bool>();
  }
  std::string text_or(const std::string& key, const std::string& fallback) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return fallback;
    CLEAVE_CHECK(v->is_string(), "{}: {} must be a string, got {}", origin_, key, v->dump());
    return v->get<std::string>();
  }
  // A setting whose every other value makes a model Cleave computes differently.
  template <typename T>
  void require(const std::string& key, const T& got, const T& cleave, std::string_view why) const {
    CLEAVE_CHECK(got == cleave, "{}: {} is {}, but Cleave needs {} ({}); this checkpoint cannot be imported", origin_,
                 key, nlohmann::json(got).dump(), nlohmann::json(cleave).dump(), why);
  }
  const std::string& origin() const { return origin_; }
  const nlohmann::json& doc() const { return doc_; }

 private:
  std::int64_t positive(const std::string& key, const nlohmann::json& v) const {
    CLEAVE_CHECK(v.is_number_integer() && v.get<std::int64_t>() > 0, "{}: {} must be a positive integer, got {}",
                 origin_, key, v.dump());
    return v.get<std::int64_t>();
  }
  const nlohmann::json& doc_;
  std::string origin_;
};

}  // namespace cleave::hf
