// Strict config parsing: JSON text -> RunConfig, --set overrides, validation, and RunConfig -> JSON.
//
// Order of checks (so the first message a user sees is the most useful one):
//   1. malformed JSON (line, column) and duplicate keys (detected while parsing; nlohmann keeps the last);
//   2. --set overrides applied to the JSON tree;
//   3. each section read: wrong types and out-of-range values, named by key path;
//   4. unknown keys, all of them in one line, each with the closest known key;
//   5. cross-key checks: the model's own rules (partition's spec builders and tensor-parallel rules, run
//      here rather than rewritten), model/data compatibility, partition lengths, schedule names (the
//      schedule registry's).
#include "engine/config/config.hpp"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "cleave/config.hpp"
#include "engine/config/comm_backend.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"
#include "partition/tp_rules.hpp"
#include "pipeline/schedules/schedules.hpp"

namespace cleave::config {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // to_json keeps the documented key order

// Short rendering of a JSON value for "got ..." in messages.
std::string show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string_view leaf_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string_view parent_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

// Keys of each model type, for "model.hidden is a key of mlp models" messages.
const std::map<std::string, std::vector<std::string>>& model_keys() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"gpt", {"vocab_size", "d_model", "n_layers", "n_heads", "seq_len", "d_ff", "tie_embeddings"}},
      {"mlp", {"in_features", "hidden", "num_classes", "activation"}},
      {"cnn", {"in_channels", "height", "width", "channels", "kernel", "pool", "num_classes"}},
  };
  return keys;
}

// Everything the readers share: where the text came from, what --set touched, which keys exist.
struct ParseState {
  std::string origin;
  std::map<std::string, std::string> set_assignments;  // key path -> "key=value" as typed
  std::set<std::string> known;                         // every key path a reader asked for
  std::vector<std::string> unknown;                    // key paths present but never asked for
  std::map<std::string, std::string> unknown_notes;    // path -> extra explanation

  // "--set a.b=v" when `path` (or a parent of it) was overridden on the command line, else the file.
  std::string where(const std::string& path) const {
    for (const auto& [key, assignment] : set_assignments) {
      if (key == path || key.starts_with(path + ".") || path.starts_with(key + ".")) return "--set " + assignment;
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

// Reads one JSON object (a section). Every accessor registers its key as known; finish() records the keys
// nobody asked for. A missing key leaves the default in place.
class Reader {
 public:
  Reader(const json* object, std::string path, ParseState& state)
      : object_(object), path_(std::move(path)), state_(state) {
    if (object_ != nullptr && !object_->is_object()) {
      fail(state_, path_, "expected an object, got {}", show(*object_));
    }
  }

  const std::string& path() const { return path_; }
  std::string key_path(std::string_view key) const { return join_path(path_, key); }

  const json* get(std::string_view key) {
    state_.known.insert(key_path(key));
    asked_.insert(std::string(key));
    if (object_ == nullptr) return nullptr;
    auto it = object_->find(key);
    return it == object_->end() ? nullptr : &*it;
  }
  bool has(std::string_view key) const { return object_ != nullptr && object_->contains(key); }

  Reader section(std::string_view key) { return Reader(get(key), key_path(key), state_); }

  bool integer(std::string_view key, std::int64_t& out, std::int64_t min,
               std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    const json* v = get(key);
    if (v == nullptr) return false;
    out = to_integer(*v, key_path(key));
    if (out < min) fail(state_, key_path(key), "must be {}, got {}", min == 1 ? "positive" : fmt::format("≥ {}", min), out);
    if (out > max) fail(state_, key_path(key), "{} is above the limit {}", out, max);
    return true;
  }
  bool integer(std::string_view key, int& out, int min, int max = std::numeric_limits<int>::max()) {
    std::int64_t wide = out;
    const bool present = integer(key, wide, min, max);
    if (present) out = static_cast<int>(wide);
    return present;
  }
  bool unsigned_integer(std::string_view key, std::uint64_t& out) {
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
  // A number in [min, max] (max_open: strictly below max).
  bool number(std::string_view key, double& out, double min, double max = std::numeric_limits<double>::infinity(),
              bool min_open = false, bool max_open = false) {
    const json* v = get(key);
    if (v == nullptr) return false;
    out = to_number(*v, key_path(key));
    check_range(key_path(key), out, min, max, min_open, max_open);
    return true;
  }
  bool boolean(std::string_view key, bool& out) {
    const json* v = get(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) fail(state_, key_path(key), "expected true or false, got {}", show(*v));
    out = v->get<bool>();
    return true;
  }
  bool string(std::string_view key, std::string& out) {
    const json* v = get(key);
    if (v == nullptr) return false;
    if (v->is_string()) {
      out = v->get<std::string>();
    } else if (const auto raw = state_.raw_override(key_path(key)); raw && !v->is_structured()) {
      out = *raw;  // --set data.path=123: the user meant the text
    } else {
      fail(state_, key_path(key), "expected a string, got {}", show(*v));
    }
    return true;
  }
  // An enum-valued key: the text is parsed here, once, against the enum's name table.
  template <NamedEnum E>
  bool choice(std::string_view key, E& out) {
    std::string text;
    if (!string(key, text)) return false;
    if (const auto value = enum_from_name<E>(text)) {
      out = *value;
      return true;
    }
    const std::string_view closest = enum_closest<E>(text);
    fail(state_, key_path(key), "\"{}\" is not one of {}{}", text, enum_choices<E>(),
         closest.empty() ? std::string() : fmt::format(" (did you mean \"{}\"?)", closest));
  }
  bool integer_list(std::string_view key, std::vector<std::int64_t>& out, std::int64_t min, std::int64_t max) {
    const json* v = get(key);
    if (v == nullptr) return false;
    if (!v->is_array()) fail(state_, key_path(key), "expected an array of integers, got {}", show(*v));
    out.clear();
    for (std::size_t i = 0; i < v->size(); ++i) {
      const std::string element = fmt::format("{}[{}]", key_path(key), i);
      const std::int64_t value = to_integer((*v)[i], element);
      if (value < min) fail(state_, element, "must be {}, got {}", min == 1 ? "positive" : fmt::format("≥ {}", min), value);
      if (value > max) fail(state_, element, "{} is above the limit {}", value, max);
      out.push_back(value);
    }
    return true;
  }
  bool number_pair(std::string_view key, std::array<double, 2>& out, double min, double max) {
    const json* v = get(key);
    if (v == nullptr) return false;
    if (!v->is_array() || v->size() != 2) fail(state_, key_path(key), "expected an array of 2 numbers, got {}", show(*v));
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string element = fmt::format("{}[{}]", key_path(key), i);
      out[i] = to_number((*v)[i], element);
      check_range(element, out[i], min, max, false, true);
    }
    return true;
  }
  bool bytes(std::string_view key, std::int64_t& out) {
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
      fail(state_, key_path(key), "expected a size in bytes or a string like \"512MiB\", got {}", show(*v));
    }
    return true;
  }

  // Records keys present but never asked for. `foreign` maps keys that belong elsewhere to an explanation.
  void finish(const std::map<std::string, std::string>& foreign = {}) {
    if (object_ == nullptr) return;
    for (const auto& item : object_->items()) {
      if (asked_.contains(item.key())) continue;
      const std::string path = key_path(item.key());
      state_.unknown.push_back(path);
      if (auto it = foreign.find(item.key()); it != foreign.end()) state_.unknown_notes[path] = it->second;
    }
  }

 private:
  std::int64_t to_integer(const json& v, const std::string& path) const {
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
    fail(state_, path, "expected an integer, got {}", show(v));
  }
  double to_number(const json& v, const std::string& path) const {
    if (!v.is_number()) fail(state_, path, "expected a number, got {}", show(v));
    return v.get<double>();
  }
  void check_range(const std::string& path, double value, double min, double max, bool min_open,
                   bool max_open) const {
    const bool low = min_open ? value <= min : value < min;
    const bool high = max_open ? value >= max : value > max;
    if (!std::isfinite(value) || low || high) {
      const std::string lower = fmt::format("{}{}", min_open ? "(" : "[", min);
      const std::string upper = std::isinf(max) ? std::string("∞)") : fmt::format("{}{}", max, max_open ? ")" : "]");
      fail(state_, path, "{} is outside {}, {}", value, lower, upper);
    }
  }

  const json* object_;
  std::string path_;
  ParseState& state_;
  std::set<std::string> asked_;
};

// ---- JSON text with duplicate-key detection ---------------------------------------------------------------

// Parses strict JSON; a key repeated within one object is an error naming its path (nlohmann would keep
// the last silently). Malformed text reports line and column.
json parse_json_strict(std::string_view text, const std::string& what) {
  struct Frame {
    bool is_object = true;
    std::set<std::string> keys;
    std::string current;  // current key (objects)
    std::size_t index = 0;  // current element (arrays)
  };
  std::vector<Frame> frames;
  auto path_of = [&](std::size_t depth) {  // location of frames[depth]'s current child
    std::string path;
    for (std::size_t i = 0; i <= depth && i < frames.size(); ++i) {
      if (frames[i].is_object) path = join_path(path, frames[i].current);
      else path += fmt::format("[{}]", frames[i].index);
    }
    return path;
  };
  auto element_done = [&] {
    if (!frames.empty() && !frames.back().is_object) ++frames.back().index;
  };
  json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: frames.push_back(Frame{true, {}, {}, 0}); break;
      case json::parse_event_t::array_start: frames.push_back(Frame{false, {}, {}, 0}); break;
      case json::parse_event_t::key: {
        Frame& frame = frames.back();
        frame.current = parsed.get<std::string>();
        if (!frame.keys.insert(frame.current).second) {
          throw Error(fmt::format("{}: duplicate key {} (JSON keeps only the last value; remove one of them)", what,
                                  path_of(frames.size() - 1)));
        }
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        element_done();
        break;
      case json::parse_event_t::value: element_done(); break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    // nlohmann's text is "[json.exception.parse_error.101] parse error at line L, column C: detail".
    std::string detail = e.what();
    if (auto at = detail.find(" at line "); at != std::string::npos) detail = detail.substr(at + 1);
    else if (auto colon = detail.find("] "); colon != std::string::npos) detail = detail.substr(colon + 2);
    throw Error(fmt::format("{}: malformed JSON {}", what, detail));
  } catch (const json::exception& e) {
    // Anything else the library raises on text (a number beyond a double, 406) is bad input too: one line,
    // without the library's "[json.exception...]" prefix.
    std::string detail = e.what();
    if (auto colon = detail.find("] "); colon != std::string::npos) detail = detail.substr(colon + 2);
    throw Error(fmt::format("{}: {} (numbers must fit a double: |x| < 1.8e308)", what, detail));
  }
}

// Offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, no surrogates, at most
// U+10FFFF), or npos. JSON strings must be UTF-8: a --set value taken as text is checked here, so nothing
// later (to_json, messages) meets bytes the JSON library refuses to write.
std::size_t invalid_utf8_at(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char c = byte(i);
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // allowed range of the second byte
    if (c < 0x80) length = 1;
    else if (c >= 0xc2 && c <= 0xdf) length = 2;
    else if (c >= 0xe0 && c <= 0xef) length = 3, low = c == 0xe0 ? 0xa0 : 0x80, high = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) length = 4, low = c == 0xf0 ? 0x90 : 0x80, high = c == 0xf4 ? 0x8f : 0xbf;
    else return i;
    if (i + length > text.size()) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const unsigned char lo = k == 1 ? low : 0x80, hi = k == 1 ? high : 0xbf;
      if (byte(i + k) < lo || byte(i + k) > hi) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

void apply_override(json& root, const std::string& assignment, ParseState& state) {
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
    CLEAVE_CHECK(child.is_object(), "--set {}: {} is not a section (it holds {})", assignment, walked, show(child));
    node = &child;
  }
  (*node)[parts.back()] = std::move(value);
  state.set_assignments[key] = assignment;
}

// ---- sections ---------------------------------------------------------------------------------------------

// Upper limits of sizes and counts: far above any real model or cluster (frontier models have d_ff ~10^5,
// ~10^2 layers, vocabularies ~10^5), low enough that the products the engine forms of them (parameter counts,
// seq_len × d_model × d_ff, micro × accumulation × dp) stay inside int64, and that no list is sized by a number
// a typo made astronomical (model.n_layers = 10^9 would build a billion blocks).
constexpr std::int64_t kMaxFeatures = std::int64_t{1} << 24;  // vocab, d_model, d_ff, seq_len, hidden, classes
constexpr std::int64_t kMaxCount = std::int64_t{1} << 16;     // layers, heads, channels, kernel, pool, image side
constexpr int kMaxParallel = 1 << 16;                           // tp, pp, dp, virtual stages
constexpr std::int64_t kMaxBatch = std::int64_t{1} << 24;      // micro-batch, accumulation steps
constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 40;

void read_model(Reader r, ModelConfig& m) {
  r.choice("type", m.type);
  if (m.type == ModelType::kGpt) {
    auto& g = m.gpt;
    r.integer("vocab_size", g.vocab_size, 1, kMaxFeatures);
    r.integer("d_model", g.d_model, 1, kMaxFeatures);
    r.integer("n_layers", g.n_layers, 1, kMaxCount);
    r.integer("n_heads", g.n_heads, 1, kMaxCount);
    r.integer("seq_len", g.seq_len, 1, kMaxFeatures);
    if (!r.integer("d_ff", g.d_ff, 1, kMaxFeatures)) g.d_ff = 4 * g.d_model;
    r.boolean("tie_embeddings", g.tie_embeddings);
  } else if (m.type == ModelType::kMlp) {
    auto& c = m.mlp;
    r.integer("in_features", c.in_features, 1, kMaxFeatures);
    r.integer_list("hidden", c.hidden, 1, kMaxFeatures);
    r.integer("num_classes", c.num_classes, 2, kMaxFeatures);
    r.choice("activation", c.activation);
  } else {
    auto& c = m.cnn;
    r.integer("in_channels", c.in_channels, 1, kMaxCount);
    r.integer("height", c.height, 1, kMaxCount);
    r.integer("width", c.width, 1, kMaxCount);
    r.integer_list("channels", c.channels, 1, kMaxCount);
    r.integer("kernel", c.kernel, 1, kMaxCount);
    r.integer("pool", c.pool, 1, kMaxCount);
    r.integer("num_classes", c.num_classes, 2, kMaxFeatures);
  }
  std::map<std::string, std::string> foreign;
  for (const auto& [type, keys] : model_keys()) {
    if (type == enum_name(m.type)) continue;
    for (const auto& key : keys) {
      const auto& own = model_keys().at(std::string(enum_name(m.type)));
      if (std::find(own.begin(), own.end(), key) == own.end()) {
        foreign[key] = fmt::format("a key of {} models, but model.type is \"{}\"", type, m.type);
      }
    }
  }
  r.finish(foreign);
}

void read_parallel(Reader r, ParallelConfig& p) {
  r.integer("tensor_model_parallel_size", p.tensor_model_parallel_size, 1, kMaxParallel);
  r.integer("pipeline_model_parallel_size", p.pipeline_model_parallel_size, 1, kMaxParallel);
  r.integer("data_parallel_size", p.data_parallel_size, -1, kMaxParallel);
  r.integer("virtual_pipeline_stages", p.virtual_pipeline_stages, 1, kMaxParallel);
  r.string("schedule", p.schedule);
  r.integer("auto_schedule_memory_limit", p.auto_schedule_memory_limit, 0);
  r.string("auto_schedule_profile", p.auto_schedule_profile);
  Reader partition = r.section("partition");
  partition.choice("method", p.partition.method);
  partition.integer_list("blocks_per_stage", p.partition.blocks_per_stage, 1, kMaxCount + 3);
  partition.finish();
  r.number("dp_bucket_mb", p.dp_bucket_mb, 0.0, std::numeric_limits<double>::infinity(), /*min_open=*/true);
  r.choice("grad_reduce_dtype", p.grad_reduce_dtype);
  r.choice("comm_backend", p.comm_backend);
  r.choice("p2p_progress", p.p2p_progress);
  r.finish();
}

void read_batch(Reader r, BatchConfig& b) {
  auto read = [&](std::string_view key, std::optional<std::int64_t>& out, std::int64_t max) {
    std::int64_t value = 0;
    if (r.integer(key, value, 1, max)) out = value;
  };
  read("global_batch_size", b.global_batch_size, kMaxGlobalBatch);
  read("micro_batch_size", b.micro_batch_size, kMaxBatch);
  read("gradient_accumulation_steps", b.gradient_accumulation_steps, kMaxBatch);
  r.finish();
}

void read_optimizer(Reader r, OptimizerConfig& o) {
  r.choice("type", o.type);
  r.number("lr", o.lr, 0.0);
  r.number("weight_decay", o.weight_decay, 0.0);
  r.number_pair("betas", o.betas, 0.0, 1.0);
  r.number("eps", o.eps, 0.0, std::numeric_limits<double>::infinity(), /*min_open=*/true);
  r.number("momentum", o.momentum, 0.0, 1.0, false, /*max_open=*/true);
  r.boolean("nesterov", o.nesterov);
  r.number("grad_clip", o.grad_clip, 0.0);
  r.integer("warmup_steps", o.warmup_steps, 0);
  r.choice("schedule", o.schedule);
  r.number("min_lr", o.min_lr, 0.0);
  r.integer("zero_stage", o.zero_stage, 0);
  r.finish();
}

void read_train(Reader r, TrainConfig& t) {
  r.integer("steps", t.steps, 1);
  r.unsigned_integer("seed", t.seed);
  r.integer("log_interval", t.log_interval, 1);
  r.boolean("deterministic", t.deterministic);
  r.string("out_dir", t.out_dir);
  r.number("comm_timeout_s", t.comm_timeout_s, 0.0, std::numeric_limits<double>::infinity(), /*min_open=*/true);
  r.boolean("trace", t.trace);
  r.integer("eval_interval", t.eval_interval, 0);
  r.integer("eval_batches", t.eval_batches, 0);
  r.choice("recompute", t.recompute);
  r.boolean("report", t.report);
  r.finish();
}

void read_checkpoint(Reader r, CheckpointConfig& c) {
  r.string("dir", c.dir);
  r.integer("interval", c.interval, 0);
  r.integer("keep_last", c.keep_last, 0);
  r.boolean("save_final", c.save_final);
  r.finish();
}

void read_data(Reader r, DataConfig& d) {
  r.choice("type", d.type);
  r.string("path", d.path);
  r.string("val_path", d.val_path);
  if (!r.number("val_fraction", d.val_fraction, 0.0, 1.0, false, /*max_open=*/true) && d.type == DataType::kDigits) {
    d.val_fraction = 0.2;
  }
  r.choice("format", d.format);
  if (d.type == DataType::kDigits && d.path.empty()) d.path = "data/digits.csv.gz";
  r.finish();
}

void read_device(Reader r, DeviceConfig& d) {
  r.choice("type", d.type);
  r.bytes("memory_limit", d.memory_limit);
  r.choice("precision", d.precision);
  r.finish();
}

// ---- unknown keys and cross-key checks --------------------------------------------------------------------

std::string suggest(const std::string& unknown, const std::set<std::string>& known) {
  const std::string_view leaf = leaf_of(unknown);
  const std::string_view parent = parent_of(unknown);
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  const std::size_t allowed = std::max<std::size_t>(2, leaf.size() / 3);
  // The distance is at least the length difference: skip what cannot be within `allowed` (a pasted 10 kB key
  // would otherwise cost 10 kB × every known key, found as the fuzz target's hot spot).
  const auto within_reach = [&](std::string_view a, std::string_view b) {
    return (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) <= allowed;
  };
  for (const std::string& candidate : known) {
    std::size_t d = within_reach(unknown, candidate) ? edit_distance(unknown, candidate) : best_distance;
    // The right key in the wrong section ("train.lr" for "optimizer.lr") is a near miss too.
    if (within_reach(leaf, leaf_of(candidate))) {
      d = std::min(d, edit_distance(leaf, leaf_of(candidate)) + (parent_of(candidate) == parent ? 0 : 1));
    }
    if (d < best_distance) best_distance = d, best = candidate;
  }
  if (best_distance <= allowed) return fmt::format(" (did you mean {}?)", best);
  std::vector<std::string> siblings;
  for (const std::string& candidate : known) {
    if (parent_of(candidate) == parent) siblings.emplace_back(leaf_of(candidate));
  }
  if (siblings.empty()) return {};
  return fmt::format(" (known keys{}: {})", parent.empty() ? std::string() : " in " + std::string(parent),
                     fmt::join(siblings, ", "));
}

void report_unknown(const ParseState& state) {
  if (state.unknown.empty()) return;
  std::string message;
  std::string last_where;
  for (const std::string& path : state.unknown) {
    auto note = state.unknown_notes.find(path);
    const std::string hint =
        note != state.unknown_notes.end() ? " (" + note->second + ")" : suggest(path, state.known);
    const std::string where = state.where(path);
    message += message.empty() ? "" : "; ";
    if (where != last_where) message += where + ": ";
    message += fmt::format("unknown key {}{}", path, hint);
    last_where = where;
  }
  throw Error(message);
}

// A cross-key check failed: validate() throws ConfigKeyError; parse_config() adds where the key came from.
template <typename... Args>
[[noreturn]] void refuse(std::string_view key, fmt::format_string<Args...> format, Args&&... args) {
  throw ConfigKeyError(std::string(key), fmt::format(format, std::forward<Args>(args)...));
}

// The model's own rules (partition/model_spec.hpp, partition/tp_rules.hpp): the spec builder and the
// tensor-parallel check throw ConfigKeyError naming the key, reported here under the key's origin. Config
// keeps no copy of these rules.
void check_model_rules(const RunConfig& c) {
  {
    const auto& m = c.model;
    const partition::ModelSpec spec = m.type == ModelType::kGpt   ? partition::make_gpt_spec(m.gpt)
                                      : m.type == ModelType::kMlp ? partition::make_mlp_spec(m.mlp)
                                                                  : partition::make_cnn_spec(m.cnn);
    partition::check_tensor_parallel(spec, c.parallel.tensor_model_parallel_size);
  }
}

}  // namespace

void validate(const RunConfig& c) {
  const auto& p = c.parallel;
  if (p.data_parallel_size == 0) {
    refuse("parallel.data_parallel_size", "must be -1 (inferred from the world size) or positive, got 0");
  }
  check_model_rules(c);
  if (c.train.recompute != Recompute::kNone && c.model.type != ModelType::kGpt) {
    refuse("train.recompute", "\"{}\" recomputes transformer blocks, and model.type {} has none; use \"none\"",
         c.train.recompute, c.model.type);
  }

  if (!p.partition.blocks_per_stage.empty()) {
    if (p.partition.method != PartitionMethod::kManual) {
      refuse("parallel.partition.blocks_per_stage", "only used with method \"manual\" (method is \"{}\")",
           p.partition.method);
    }
    const std::size_t stages = static_cast<std::size_t>(p.pipeline_model_parallel_size) *
                               static_cast<std::size_t>(p.virtual_pipeline_stages);
    if (p.partition.blocks_per_stage.size() != stages) {
      refuse("parallel.partition.blocks_per_stage",
           "has {} entries, expected pipeline_model_parallel_size {} × virtual_pipeline_stages {} = {}",
           p.partition.blocks_per_stage.size(), p.pipeline_model_parallel_size, p.virtual_pipeline_stages, stages);
    }
  } else if (p.partition.method == PartitionMethod::kManual) {
    refuse("parallel.partition.blocks_per_stage", "missing; required with method \"manual\" (one block count per stage)");
  }
  if (!pipeline::is_schedule_name(p.schedule) && !std::filesystem::is_regular_file(p.schedule)) {
    const std::vector<std::string_view> names = pipeline::schedule_names();
    std::string_view closest;
    std::size_t best = std::numeric_limits<std::size_t>::max();
    for (std::string_view name : names) {
      if (const std::size_t d = edit_distance(p.schedule, name); d < best) best = d, closest = name;
    }
    refuse("parallel.schedule", "\"{}\" is neither a schedule ({}) nor an existing schedule file{}", p.schedule,
         fmt::join(names, ", "), best <= 3 ? fmt::format(" (did you mean \"{}\"?)", closest) : std::string());
  }

  if (!p.auto_schedule_profile.empty() && p.schedule != "auto") {
    refuse("parallel.auto_schedule_profile",
         "applies only to parallel.schedule \"auto\" (the automatic scheduler), but the schedule is \"{}\"",
         p.schedule);
  }
  if (p.auto_schedule_memory_limit != 0 && p.schedule != "auto") {
    refuse("parallel.auto_schedule_memory_limit",
         "applies only to parallel.schedule \"auto\" (the automatic scheduler), but the schedule is \"{}\"",
         p.schedule);
  }

  // What is known before launch (build, device type); the factory adds the per-rank GPU probe.
  {
    CommBackendFacts facts;
    facts.cuda_build = CLEAVE_WITH_CUDA != 0;
    facts.device_type = c.device.type;
    (void)choose_comm_backend(p.comm_backend, facts);
  }

  const auto& o = c.optimizer;
  if (o.min_lr > o.lr) refuse("optimizer.min_lr", "{} is larger than optimizer.lr {}", o.min_lr, o.lr);
  if (o.zero_stage > 1) refuse("optimizer.zero_stage", "must be 0 or 1, got {}", o.zero_stage);
  if (o.type == OptimizerType::kSgd && o.nesterov && o.momentum == 0.0) {
    refuse("optimizer.nesterov", "needs optimizer.momentum > 0 (momentum is 0)");
  }
  if (c.train.out_dir.empty()) refuse("train.out_dir", "must not be empty");

  const auto& d = c.data;
  if ((d.type == DataType::kText || d.type == DataType::kTokens) && d.path.empty()) {
    refuse("data.path", "missing; required for data.type \"{}\"", d.type);
  }
  if (d.type == DataType::kText || d.type == DataType::kTokens) {
    if (c.model.type != ModelType::kGpt) {
      refuse("data.type", "\"{}\" needs model.type \"gpt\" (model.type is \"{}\")", d.type, c.model.type);
    }
    if (d.type == DataType::kText && c.model.gpt.vocab_size < 256) {
      refuse("model.vocab_size", "{} is too small: data.type \"text\" uses byte tokens 0..255 (needs ≥ 256)",
           c.model.gpt.vocab_size);
    }
  }
  if (d.type == DataType::kDigits) {
    if (c.model.type == ModelType::kGpt) {
      refuse("data.type", "\"digits\" needs model.type \"mlp\" or \"cnn\" (model.type is \"gpt\")");
    }
    if (c.model.type == ModelType::kMlp && c.model.mlp.in_features != 64) {
      refuse("model.in_features", "{}, but digits images have 8×8 = 64 pixels", c.model.mlp.in_features);
    }
    if (c.model.type == ModelType::kCnn &&
        (c.model.cnn.in_channels != 1 || c.model.cnn.height != 8 || c.model.cnn.width != 8)) {
      refuse("model", "cnn input is in_channels {} × height {} × width {}, but digits images are 1 × 8 × 8",
           c.model.cnn.in_channels, c.model.cnn.height, c.model.cnn.width);
    }
    const std::int64_t classes = c.model.type == ModelType::kMlp ? c.model.mlp.num_classes : c.model.cnn.num_classes;
    if (classes < 10) refuse("model.num_classes", "{} is fewer than the 10 digit classes", classes);
  }
  const bool has_eval_split = d.type == DataType::kSynthetic || !d.val_path.empty() || d.val_fraction > 0.0;
  if (!has_eval_split && c.train.eval_batches > 0) {
    refuse("train.eval_batches", "{} batches asked for, but there is no evaluation data (data.val_fraction is 0 and data.val_path "
         "is empty); set train.eval_batches=0 or give an evaluation split", c.train.eval_batches);
  }
  if (d.type == DataType::kDigits && !d.val_path.empty()) {
    refuse("data.val_path", "not used with data.type \"digits\" (its test split is the last "
         "data.val_fraction of the file)");
  }
}

namespace {

// ---- writing ----------------------------------------------------------------------------------------------

// An enum-valued key as the text its name table gives it.
template <NamedEnum E>
std::string text(E value) {
  return std::string(enum_name(value));
}

ordered_json write_model(const ModelConfig& m) {
  ordered_json j = {{"type", text(m.type)}};
  if (m.type == ModelType::kGpt) {
    const auto& g = m.gpt;
    j.update({{"vocab_size", g.vocab_size}, {"d_model", g.d_model}, {"n_layers", g.n_layers}, {"n_heads", g.n_heads},
              {"seq_len", g.seq_len}, {"d_ff", g.d_ff == 0 ? 4 * g.d_model : g.d_ff},
              {"tie_embeddings", g.tie_embeddings}});
  } else if (m.type == ModelType::kMlp) {
    const auto& c = m.mlp;
    j.update({{"in_features", c.in_features}, {"hidden", c.hidden}, {"num_classes", c.num_classes},
              {"activation", text(c.activation)}});
  } else {
    const auto& c = m.cnn;
    j.update({{"in_channels", c.in_channels}, {"height", c.height}, {"width", c.width}, {"channels", c.channels},
              {"kernel", c.kernel}, {"pool", c.pool}, {"num_classes", c.num_classes}});
  }
  return j;
}

ordered_json to_json_tree(const RunConfig& c) {
  ordered_json j;
  j["model"] = write_model(c.model);
  const auto& p = c.parallel;
  j["parallel"] = {{"tensor_model_parallel_size", p.tensor_model_parallel_size},
                   {"pipeline_model_parallel_size", p.pipeline_model_parallel_size},
                   {"data_parallel_size", p.data_parallel_size},
                   {"virtual_pipeline_stages", p.virtual_pipeline_stages},
                   {"schedule", p.schedule},
                   {"auto_schedule_memory_limit", p.auto_schedule_memory_limit},
                   {"auto_schedule_profile", p.auto_schedule_profile},
                   {"partition", {{"method", text(p.partition.method)}, {"blocks_per_stage", p.partition.blocks_per_stage}}},
                   {"dp_bucket_mb", p.dp_bucket_mb},
                   {"grad_reduce_dtype", text(p.grad_reduce_dtype)},
                   {"comm_backend", text(p.comm_backend)},
                   {"p2p_progress", text(p.p2p_progress)}};
  ordered_json batch = ordered_json::object();
  if (c.batch.global_batch_size) batch["global_batch_size"] = *c.batch.global_batch_size;
  if (c.batch.micro_batch_size) batch["micro_batch_size"] = *c.batch.micro_batch_size;
  if (c.batch.gradient_accumulation_steps) batch["gradient_accumulation_steps"] = *c.batch.gradient_accumulation_steps;
  j["batch"] = batch;
  const auto& o = c.optimizer;
  j["optimizer"] = {{"type", text(o.type)},         {"lr", o.lr},
                    {"weight_decay", o.weight_decay}, {"betas", o.betas},
                    {"eps", o.eps},           {"momentum", o.momentum},
                    {"nesterov", o.nesterov}, {"grad_clip", o.grad_clip},
                    {"warmup_steps", o.warmup_steps}, {"schedule", text(o.schedule)},
                    {"min_lr", o.min_lr},     {"zero_stage", o.zero_stage}};
  const auto& t = c.train;
  j["train"] = {{"steps", t.steps},         {"seed", t.seed},
                {"log_interval", t.log_interval}, {"deterministic", t.deterministic},
                {"out_dir", t.out_dir},     {"comm_timeout_s", t.comm_timeout_s},
                {"trace", t.trace},         {"eval_interval", t.eval_interval},
                {"eval_batches", t.eval_batches}, {"recompute", text(t.recompute)}, {"report", t.report}};
  j["checkpoint"] = {{"dir", c.checkpoint.dir},
                     {"interval", c.checkpoint.interval},
                     {"keep_last", c.checkpoint.keep_last},
                     {"save_final", c.checkpoint.save_final}};
  const auto& d = c.data;
  j["data"] = {{"type", text(d.type)}, {"path", d.path}, {"val_path", d.val_path}, {"val_fraction", d.val_fraction},
               {"format", text(d.format)}};
  j["device"] = {{"type", text(c.device.type)}, {"memory_limit", c.device.memory_limit}, {"precision", text(c.device.precision)}};
  return j;
}

}  // namespace

bool operator==(const ModelConfig& a, const ModelConfig& b) {
  const auto& ga = a.gpt;
  const auto& gb = b.gpt;
  const bool gpt = ga.vocab_size == gb.vocab_size && ga.d_model == gb.d_model && ga.n_layers == gb.n_layers &&
                   ga.n_heads == gb.n_heads && ga.seq_len == gb.seq_len && ga.d_ff == gb.d_ff &&
                   ga.tie_embeddings == gb.tie_embeddings;
  const bool mlp = a.mlp.in_features == b.mlp.in_features && a.mlp.hidden == b.mlp.hidden &&
                   a.mlp.num_classes == b.mlp.num_classes && a.mlp.activation == b.mlp.activation;
  const auto& ca = a.cnn;
  const auto& cb = b.cnn;
  const bool cnn = ca.in_channels == cb.in_channels && ca.height == cb.height && ca.width == cb.width &&
                   ca.channels == cb.channels && ca.kernel == cb.kernel && ca.pool == cb.pool &&
                   ca.num_classes == cb.num_classes;
  return a.type == b.type && gpt && mlp && cnn;
}

namespace {

// micro × accumulation × dp (all >= 1), refused past 2^62 samples instead of overflowing int64.
std::int64_t batch_product(std::int64_t micro, std::int64_t accumulation, std::int64_t dp) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 62;
  CLEAVE_CHECK(micro <= kLimit / accumulation && micro * accumulation <= kLimit / dp,
               "batch: micro_batch_size {} × gradient_accumulation_steps {} × data-parallel size {} is beyond 2^62 "
               "samples per step",
               micro, accumulation, dp);
  return micro * accumulation * dp;
}

}  // namespace

ResolvedBatch resolve_batch(const BatchConfig& batch, int dp_size) {
  CLEAVE_ASSERT(dp_size >= 1, "resolve_batch with dp_size {}", dp_size);
  const std::int64_t dp = dp_size;
  const auto& g = batch.global_batch_size;
  const auto& m = batch.micro_batch_size;
  const auto& a = batch.gradient_accumulation_steps;
  ResolvedBatch r;
  if (g && m && a) {
    const std::int64_t product = batch_product(*m, *a, dp);
    CLEAVE_CHECK(*g == product,
                 "batch: global_batch_size {} != micro_batch_size {} × gradient_accumulation_steps {} × data-parallel "
                 "size {} = {}; drop one of the three to have it computed",
                 *g, *m, *a, dp, product);
    r = {*g, *m, *a};
  } else if (g && m) {
    CLEAVE_CHECK(*g % (*m * dp) == 0,
                 "batch: global_batch_size {} is not divisible by micro_batch_size {} × data-parallel size {} = {} "
                 "(gradient_accumulation_steps would be {:.4g})",
                 *g, *m, dp, *m * dp, static_cast<double>(*g) / static_cast<double>(*m * dp));
    r = {*g, *m, *g / (*m * dp)};
  } else if (g && a) {
    CLEAVE_CHECK(*g % (*a * dp) == 0,
                 "batch: global_batch_size {} is not divisible by gradient_accumulation_steps {} × data-parallel size "
                 "{} = {} (micro_batch_size would be {:.4g})",
                 *g, *a, dp, *a * dp, static_cast<double>(*g) / static_cast<double>(*a * dp));
    r = {*g, *g / (*a * dp), *a};
  } else if (g) {
    CLEAVE_CHECK(*g % dp == 0,
                 "batch: global_batch_size {} is not divisible by data-parallel size {} (with "
                 "gradient_accumulation_steps 1, micro_batch_size would be {:.4g})",
                 *g, dp, static_cast<double>(*g) / static_cast<double>(dp));
    r = {*g, *g / dp, 1};
  } else {
    const std::int64_t micro = m.value_or(8);
    const std::int64_t accumulation = a.value_or(1);
    r = {batch_product(micro, accumulation, dp), micro, accumulation};
  }
  return r;
}

void RunConfig::resolve(int world_size) {
  CLEAVE_CHECK(world_size >= 1, "world size must be positive, got {}", world_size);
  const std::int64_t tp = parallel.tensor_model_parallel_size;  // 64-bit: tp × pp may pass INT_MAX
  const std::int64_t pp = parallel.pipeline_model_parallel_size;
  CLEAVE_CHECK(world_size % (tp * pp) == 0,
               "world size {} is not divisible by tp({}) × pp({}) = {}; launch a multiple of {} ranks", world_size, tp,
               pp, tp * pp, tp * pp);
  const int dp = static_cast<int>(world_size / (tp * pp));
  if (parallel.data_parallel_size != -1) {
    CLEAVE_CHECK(parallel.data_parallel_size == dp,
                 "parallel.data_parallel_size is {}, but world size {} / (tp {} × pp {}) = {}; launch {} ranks or set "
                 "it to -1",
                 parallel.data_parallel_size, world_size, tp, pp, dp, tp * pp * parallel.data_parallel_size);
  }
  parallel.data_parallel_size = dp;
  if (checkpoint.dir.empty()) checkpoint.dir = (std::filesystem::path(train.out_dir) / "checkpoints").string();
  const ResolvedBatch r = resolve_batch(batch, dp);
  batch = {r.global_batch_size, r.micro_batch_size, r.gradient_accumulation_steps};
}

ResolvedBatch RunConfig::resolved_batch() const {
  CLEAVE_ASSERT(parallel.data_parallel_size >= 1 && batch.global_batch_size && batch.micro_batch_size &&
                    batch.gradient_accumulation_steps,
                "resolved_batch() before RunConfig::resolve()");
  return {*batch.global_batch_size, *batch.micro_batch_size, *batch.gradient_accumulation_steps};
}

RunConfig parse_config(std::string_view json_text, std::string_view origin, const std::vector<std::string>& overrides) {
  try {
    ParseState state;
    state.origin = std::string(origin);
    json root = json_text.empty() ? json::object() : parse_json_strict(json_text, "config " + state.origin);
    if (!root.is_object()) {
      throw Error(fmt::format("config {}: expected a JSON object {{...}} at the top level, got {}", state.origin, show(root)));
    }
    for (const std::string& assignment : overrides) apply_override(root, assignment, state);

    RunConfig c;
    Reader top(&root, "", state);
    read_model(top.section("model"), c.model);
    read_parallel(top.section("parallel"), c.parallel);
    read_batch(top.section("batch"), c.batch);
    read_optimizer(top.section("optimizer"), c.optimizer);
    read_train(top.section("train"), c.train);
    read_checkpoint(top.section("checkpoint"), c.checkpoint);
    read_data(top.section("data"), c.data);
    read_device(top.section("device"), c.device);
    top.finish();
    report_unknown(state);
    try {
      validate(c);
    } catch (const ConfigKeyError& e) {
      fail(state, e.key(), "{}", e.detail());
    }
    return c;
  } catch (const Error& e) {
    rethrow_one_line(e);  // names and keys quoted from the input may hold control characters
  }
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return parse_config("", "<defaults>", overrides);
  std::error_code ec;
  CLEAVE_CHECK(std::filesystem::exists(path, ec), "config {}: no such file", path);
  CLEAVE_CHECK(!std::filesystem::is_directory(path, ec), "config {}: is a directory, expected a JSON file", path);
  std::ifstream in(path, std::ios::binary);
  CLEAVE_CHECK(in.good(), "config {}: cannot open for reading", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const bool blank = std::all_of(text.begin(), text.end(), [](unsigned char ch) { return std::isspace(ch); });
  CLEAVE_CHECK(!blank, "config {}: file is empty; write {{}} for all defaults", path);
  return parse_config(text, path, overrides);
}

std::string keyed_message(const ConfigKeyError& error, std::string_view origin,
                          const std::vector<std::string>& overrides) {
  ParseState state;
  state.origin = std::string(origin);
  for (const std::string& assignment : overrides) {
    if (const auto eq = assignment.find('='); eq != std::string::npos && eq > 0) {
      state.set_assignments[assignment.substr(0, eq)] = assignment;
    }
  }
  return escape_control(fmt::format("{}: {}: {}", state.where(error.key()), error.key(), error.detail()));
}

std::string to_json(const RunConfig& config) { return to_json_tree(config).dump(2) + "\n"; }

}  // namespace cleave::config
