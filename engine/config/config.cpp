// Strict config reading: JSON text -> RunConfig, --set overrides, unknown keys with suggestions, then validate().
// The other concerns live beside it: strict_json.cpp (JSON text, UTF-8, duplicate keys), validate.cpp (cross-key
// checks), batch.cpp (batch arithmetic, resolve), write.cpp (RunConfig -> JSON).
//
// Order of checks (so the first message a user sees is the most useful one):
//   1. malformed JSON (line, column) and duplicate keys (detected while parsing; nlohmann keeps the last);
//   2. --set overrides applied to the JSON tree;
//   3. each section read: wrong types and out-of-range values, named by key path;
//   4. unknown keys, all of them in one line, each with the closest known key;
//   5. cross-key checks: validate() (validate.cpp), reported under the key's origin.
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
#include <span>
#include <sstream>
#include <type_traits>
#include <variant>

#include "cleave/config.hpp"
#include "engine/config/fields.hpp"
#include "engine/config/strict_json.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/edit_distance.hpp"
#include "engine/core/error.hpp"
#include "engine/core/one_line.hpp"

namespace cleave::config {
namespace {

using json = nlohmann::json;

// Short rendering of a JSON value for "got ..." in messages.
std::string show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string join_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
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
  static const std::map<std::string, std::vector<std::string>> keys = [] {
    auto names = [](const auto& fields) {
      std::vector<std::string> out;
      for (const auto& f : fields) out.emplace_back(f.key);
      return out;
    };
    std::map<std::string, std::vector<std::string>> out;
    for_each_model_fields([&](const auto& row) { out[std::string(enum_name(row.type))] = names(row.fields); });
    return out;
  }();
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
    try {
      out = parse_enum<E>(text, key_path(key));
    } catch (const ConfigKeyError& e) {
      fail(state_, e.key(), "{}", e.detail());
    }
    return true;
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
  bool string_list(std::string_view key, std::vector<std::string>& out) {
    const json* v = get(key);
    if (v == nullptr) return false;
    if (v->is_string()) {  // --set data.paths=a.bin: one entry
      out = {v->get<std::string>()};
      return true;
    }
    if (!v->is_array()) fail(state_, key_path(key), "expected an array of strings, got {}", show(*v));
    out.clear();
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) fail(state_, fmt::format("{}[{}]", key_path(key), i), "expected a string, got {}", show((*v)[i]));
      out.push_back((*v)[i].get<std::string>());
    }
    return true;
  }
  bool number_list(std::string_view key, std::vector<double>& out, double min, double max) {
    const json* v = get(key);
    if (v == nullptr) return false;
    if (!v->is_array()) fail(state_, key_path(key), "expected an array of numbers, got {}", show(*v));
    out.clear();
    for (std::size_t i = 0; i < v->size(); ++i) {
      const std::string element = fmt::format("{}[{}]", key_path(key), i);
      const double value = to_number((*v)[i], element);
      check_range(element, value, min, max, false, false);
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
// kMaxFeatures (vocab, d_model, d_ff, seq_len, hidden, classes), kMaxCount (layers, heads, channels, kernel,
// pool, image side) and kMaxParallel (tp, pp, dp, virtual stages) are in fields.hpp.

// Reads each key of `fields` with the Reader method its member's type (and, for bytes, its kind) calls for.
template <typename Section>
void read_fields(Reader& r, Section& s, std::span<const Field<Section>> fields) {
  for (const Field<Section>& f : fields) {
    std::visit(
        [&](auto member) {
          auto& out = s.*member;
          using T = std::remove_cvref_t<decltype(out)>;
          if constexpr (NamedEnum<T>) {
            r.choice(f.key, out);
          } else if constexpr (std::same_as<T, bool>) {
            r.boolean(f.key, out);
          } else if constexpr (std::same_as<T, std::string>) {
            r.string(f.key, out);
          } else if constexpr (std::same_as<T, double>) {
            r.number(f.key, out, f.min, f.max, f.min_open, f.max_open);
          } else if constexpr (std::same_as<T, std::uint64_t>) {
            r.unsigned_integer(f.key, out);
          } else if constexpr (std::same_as<T, std::vector<std::int64_t>>) {
            r.integer_list(f.key, out, f.min_int, f.max_int);
          } else if constexpr (std::same_as<T, std::array<double, 2>>) {
            r.number_pair(f.key, out, f.min, f.max);
          } else if constexpr (std::same_as<T, std::vector<std::string>>) {
            r.string_list(f.key, out);
          } else if constexpr (std::same_as<T, std::vector<double>>) {
            r.number_list(f.key, out, f.min, f.max);
          } else if constexpr (std::same_as<T, std::optional<std::int64_t>>) {
            std::int64_t value = 0;
            if (r.integer(f.key, value, f.min_int, f.max_int)) out = value;
          } else if constexpr (std::same_as<T, int>) {
            r.integer(f.key, out, static_cast<int>(f.min_int), static_cast<int>(f.max_int));
          } else {
            static_assert(std::same_as<T, std::int64_t>);
            if (f.kind == FieldKind::kBytes) {
              r.bytes(f.key, out);
            } else {
              r.integer(f.key, out, f.min_int, f.max_int);
            }
          }
        },
        f.member);
  }
}

void read_model(Reader r, ModelConfig& m) {
  r.choice("type", m.type);
  for_each_model_fields([&](const auto& row) {
    if (row.type == m.type) read_fields(r, m.*row.config, row.fields);
  });
  // Absent keys that default from others (gpt's d_ff, llama's n_kv_heads and ffn_hidden_size); a given one is
  // never 0 (their minimum is 1), so only absent keys resolve.
  if (const auto resolve = partition::family(m.type).resolve) resolve(m);
  std::map<std::string, std::vector<std::string>> owners;  // a key of other types -> those types
  const auto& own = model_keys().at(std::string(enum_name(m.type)));
  for (const auto& [type, keys] : model_keys()) {
    if (type == enum_name(m.type)) continue;
    for (const auto& key : keys) {
      if (std::find(own.begin(), own.end(), key) == own.end()) owners[key].push_back(type);
    }
  }
  std::map<std::string, std::string> foreign;
  for (const auto& [key, types] : owners) {
    foreign[key] = fmt::format("a key of {} models, but model.type is \"{}\"", fmt::join(types, " and "), m.type);
  }
  r.finish(foreign);
}


void read_parallel(Reader r, ParallelConfig& p) {
  const std::span<const Field<ParallelConfig>> fields = kParallelFields;
  read_fields(r, p, fields.first(kParallelPartitionAt));
  Reader partition = r.section("partition");
  read_fields<PartitionConfig>(partition, p.partition, kPartitionFields);
  partition.finish();
  read_fields(r, p, fields.subspan(kParallelPartitionAt));
  r.finish();
}

void read_batch(Reader r, BatchConfig& b) {
  read_fields<BatchConfig>(r, b, kBatchFields);
  r.finish();
}

void read_optimizer(Reader r, OptimizerConfig& o) {
  read_fields<OptimizerConfig>(r, o, kOptimizerFields);
  r.finish();
}

void read_train(Reader r, TrainConfig& t) {
  read_fields<TrainConfig>(r, t, kTrainFields);
  r.finish();
}

void read_checkpoint(Reader r, CheckpointConfig& c) {
  read_fields<CheckpointConfig>(r, c, kCheckpointFields);
  r.finish();
}

void read_data(Reader r, DataConfig& d) {
  read_fields<DataConfig>(r, d, kDataFields);
  // digits' own defaults, where the key was not given
  if (d.type == DataType::kDigits && !r.has("val_fraction")) d.val_fraction = 0.2;
  if (d.type == DataType::kDigits && d.path.empty()) d.path = "data/digits.csv.gz";
  r.finish();
}

void read_device(Reader r, DeviceConfig& d) {
  read_fields<DeviceConfig>(r, d, kDeviceFields);
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

}  // namespace

// Every family's struct is compared (not only the configured one's), member by member through the field
// tables, which list every member.
bool operator==(const ModelConfig& a, const ModelConfig& b) {
  bool same = a.type == b.type;
  for_each_model_fields([&](const auto& row) {
    for (const auto& field : row.fields) {
      std::visit([&](auto member) { same = same && (a.*row.config).*member == (b.*row.config).*member; },
                 field.member);
    }
  });
  return same;
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

namespace {
void resolve_input_paths(RunConfig& c, const std::string& config_path, const nlohmann::json& file,
                         const std::vector<std::string>& overrides);
}  // namespace

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
  RunConfig c = parse_config(text, path, overrides);
  resolve_input_paths(c, path, parse_json_strict(text, "config " + path), overrides);
  return c;
}

namespace {
// Input files named in a config file are relative to the file, so a config moves with its data; a --set value
// is a command-line value, relative to the working directory like --init-from. Outputs (train.out_dir,
// checkpoint.dir) stay relative to the working directory: runs are made where the command runs.
void resolve_input_paths(RunConfig& c, const std::string& config_path, const nlohmann::json& file,
                         const std::vector<std::string>& overrides) {
  const auto overridden = [&](std::string_view key) {
    return std::any_of(overrides.begin(), overrides.end(), [&](const std::string& o) {
      return o.size() > key.size() && o.compare(0, key.size(), key) == 0 && o[key.size()] == '=';
    });
  };
  const auto data = file.find("data");
  if (data == file.end() || !data->is_object()) return;
  const std::filesystem::path dir = std::filesystem::absolute(config_path).parent_path();
  const auto resolve = [&](std::string& p) {
    if (!p.empty() && std::filesystem::path(p).is_relative()) p = (dir / p).lexically_normal().string();
  };
  if (data->contains("path") && !overridden("data.path")) resolve(c.data.path);
  if (data->contains("val_path") && !overridden("data.val_path")) resolve(c.data.val_path);
  if (data->contains("paths") && !overridden("data.paths")) {
    for (std::string& p : c.data.paths) resolve(p);
  }
}
}  // namespace

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

}  // namespace cleave::config
