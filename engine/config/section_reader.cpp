// SectionReader's accessors: see section_reader.hpp.
#include "engine/config/section_reader.hpp"

#include <cmath>
#include <utility>

#include "engine/core/allocator.hpp"

namespace cleave::config {
namespace {
using json = nlohmann::json;
}  // namespace

SectionReader::SectionReader(const json* object, std::string path, ParseState& state)
    : object_(object), path_(std::move(path)), state_(state) {
  if (object_ != nullptr && !object_->is_object()) {
    fail(state_, path_, "expected an object, got {}", show_value(*object_));
  }
}

const json* SectionReader::get(std::string_view key) {
  state_.known.insert(key_path(key));
  asked_.insert(std::string(key));
  if (object_ == nullptr) return nullptr;
  auto it = object_->find(key);
  return it == object_->end() ? nullptr : &*it;
}

bool SectionReader::integer(std::string_view key, std::int64_t& out, std::int64_t min, std::int64_t max) {
  const json* v = get(key);
  if (v == nullptr) return false;
  out = to_integer(*v, key_path(key));
  check_integer_range(key_path(key), out, min, max);
  return true;
}

bool SectionReader::integer(std::string_view key, int& out, int min, int max) {
  std::int64_t wide = out;
  const bool present = integer(key, wide, min, max);
  if (present) out = static_cast<int>(wide);
  return present;
}

bool SectionReader::unsigned_integer(std::string_view key, std::uint64_t& out) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (v->is_number_unsigned()) {
    out = v->get<std::uint64_t>();
  } else {
    const std::int64_t value = to_integer(*v, key_path(key));
    if (value < 0) fail(state_, key_path(key), "must be ≥ 0, got {}", value);
    out = static_cast<std::uint64_t>(value);
  }
  return true;
}

bool SectionReader::number(std::string_view key, double& out, double min, double max, bool min_open, bool max_open) {
  const json* v = get(key);
  if (v == nullptr) return false;
  out = to_number(*v, key_path(key));
  check_range(key_path(key), out, min, max, min_open, max_open);
  return true;
}

bool SectionReader::boolean(std::string_view key, bool& out) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) fail(state_, key_path(key), "expected true or false, got {}", show_value(*v));
  out = v->get<bool>();
  return true;
}

bool SectionReader::string(std::string_view key, std::string& out) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (v->is_string()) {
    out = v->get<std::string>();
  } else if (const auto raw = state_.raw_override(key_path(key)); raw && !v->is_structured()) {
    out = *raw;  // --set data.path=123: the user meant the text
  } else {
    fail(state_, key_path(key), "expected a string, got {}", show_value(*v));
  }
  return true;
}

bool SectionReader::integer_list(std::string_view key, std::vector<std::int64_t>& out, std::int64_t min,
                                 std::int64_t max) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (!v->is_array()) fail(state_, key_path(key), "expected an array of integers, got {}", show_value(*v));
  out.clear();
  for (std::size_t i = 0; i < v->size(); ++i) {
    const std::string element = fmt::format("{}[{}]", key_path(key), i);
    const std::int64_t value = to_integer((*v)[i], element);
    check_integer_range(element, value, min, max);
    out.push_back(value);
  }
  return true;
}

bool SectionReader::string_list(std::string_view key, std::vector<std::string>& out) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (v->is_string()) {  // --set data.paths=a.bin: one entry
    out = {v->get<std::string>()};
    return true;
  }
  if (!v->is_array()) fail(state_, key_path(key), "expected an array of strings, got {}", show_value(*v));
  out.clear();
  for (std::size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      fail(state_, fmt::format("{}[{}]", key_path(key), i), "expected a string, got {}", show_value((*v)[i]));
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return true;
}

bool SectionReader::number_list(std::string_view key, std::vector<double>& out, double min, double max) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (!v->is_array()) fail(state_, key_path(key), "expected an array of numbers, got {}", show_value(*v));
  out.clear();
  for (std::size_t i = 0; i < v->size(); ++i) {
    const std::string element = fmt::format("{}[{}]", key_path(key), i);
    const double value = to_number((*v)[i], element);
    check_range(element, value, min, max, false, false);
    out.push_back(value);
  }
  return true;
}

bool SectionReader::number_pair(std::string_view key, std::array<double, 2>& out, double min, double max) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (!v->is_array() || v->size() != 2) {
    fail(state_, key_path(key), "expected an array of 2 numbers, got {}", show_value(*v));
  }
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string element = fmt::format("{}[{}]", key_path(key), i);
    out[i] = to_number((*v)[i], element);
    check_range(element, out[i], min, max, false, true);
  }
  return true;
}

bool SectionReader::bytes(std::string_view key, std::int64_t& out) {
  const json* v = get(key);
  if (v == nullptr) return false;
  if (v->is_string()) {
    try {
      out = parse_bytes(v->get<std::string>(), key_path(key));
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", state_.where(key_path(key)), e.what()));
    }
  } else if (v->is_number()) {
    out = to_integer(*v, key_path(key));
    if (out < 0) fail(state_, key_path(key), "must be ≥ 0 bytes, got {}", out);
  } else {
    fail(state_, key_path(key), "expected a size in bytes or a string like \"512MiB\", got {}", show_value(*v));
  }
  return true;
}

void SectionReader::finish(const std::map<std::string, std::string>& foreign) {
  if (object_ == nullptr) return;
  for (const auto& item : object_->items()) {
    if (asked_.contains(item.key())) continue;
    const std::string path = key_path(item.key());
    state_.unknown.push_back(path);
    if (auto it = foreign.find(item.key()); it != foreign.end()) state_.unknown_notes[path] = it->second;
  }
}

std::int64_t SectionReader::to_integer(const json& v, const std::string& path) const {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) fail(state_, path, "{} is too large", u);
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<std::int64_t>(d);
  }
  fail(state_, path, "expected an integer, got {}", show_value(v));
}

double SectionReader::to_number(const json& v, const std::string& path) const {
  if (!v.is_number()) fail(state_, path, "expected a number, got {}", show_value(v));
  return v.get<double>();
}

void SectionReader::check_integer_range(const std::string& path, std::int64_t value, std::int64_t min,
                                        std::int64_t max) const {
  if (value < min) fail(state_, path, "must be {}, got {}", min == 1 ? "positive" : fmt::format("≥ {}", min), value);
  if (value > max) fail(state_, path, "{} is above the limit {}", value, max);
}

void SectionReader::check_range(const std::string& path, double value, double min, double max, bool min_open,
                                bool max_open) const {
  const bool low = min_open ? value <= min : value < min;
  const bool high = max_open ? value >= max : value > max;
  if (!std::isfinite(value) || low || high) {
    const std::string lower = fmt::format("{}{}", min_open ? "(" : "[", min);
    const std::string upper = std::isinf(max) ? std::string("∞)") : fmt::format("{}{}", max, max_open ? ")" : "]");
    fail(state_, path, "{} is outside {}, {}", value, lower, upper);
  }
}

}  // namespace cleave::config
