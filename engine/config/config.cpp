// Strict config reading: JSON text -> RunConfig, --set overrides, unknown keys with suggestions, then validate().
// The reading is made of parts: section_reader.hpp (typed keys of one section, the known keys recorded),
// parse_state.hpp (where a key came from, the error every reader throws), set_override.hpp (--set),
// unknown_keys.hpp (unknown keys with suggestions). The other concerns live beside it: strict_json.cpp (JSON text,
// UTF-8, duplicate keys), validate.cpp (cross-key checks), batch.cpp (batch arithmetic, resolve), write.cpp
// (RunConfig -> JSON).
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
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <type_traits>
#include <variant>

#include "cleave/config.hpp"
#include "engine/config/fields.hpp"
#include "engine/config/input_paths.hpp"
#include "engine/config/section_reader.hpp"
#include "engine/config/set_override.hpp"
#include "engine/config/strict_json.hpp"
#include "engine/config/unknown_keys.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/one_line.hpp"

namespace cleave::config {
namespace {

using json = nlohmann::json;

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

// ---- sections ---------------------------------------------------------------------------------------------

// Upper limits of sizes and counts: far above any real model or cluster (frontier models have d_ff ~10^5,
// ~10^2 layers, vocabularies ~10^5), low enough that the products the engine forms of them (parameter counts,
// seq_len × d_model × d_ff, micro × accumulation × dp) stay inside int64, and that no list is sized by a number
// a typo made astronomical (model.n_layers = 10^9 would build a billion blocks).
// kMaxFeatures (vocab, d_model, d_ff, seq_len, hidden, classes), kMaxCount (layers, heads, channels, kernel,
// pool, image side) and kMaxParallel (tp, pp, dp, virtual stages) are in fields.hpp.

// Reads each key of `fields` with the SectionReader method its member's type (and, for bytes, its kind) calls for.
template <typename Section>
void read_fields(SectionReader& r, Section& s, std::span<const Field<Section>> fields) {
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

void read_model(SectionReader r, ModelConfig& m) {
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
  // A type given by --set over a file of another family's keys: the note says so (the file is named first).
  const std::string type_where = r.where("type");
  const std::string type_from = type_where.starts_with("--set") ? " (" + type_where + ")" : "";
  std::map<std::string, std::string> foreign;
  for (const auto& [key, types] : owners) {
    foreign[key] = fmt::format("a key of {} models, but model.type is \"{}\"{}", fmt::join(types, " and "), m.type,
                               type_from);
  }
  r.finish(foreign);
}


void read_parallel(SectionReader r, ParallelConfig& p) {
  const std::span<const Field<ParallelConfig>> fields = kParallelFields;
  read_fields(r, p, fields.first(kParallelPartitionAt));
  SectionReader partition = r.section("partition");
  read_fields<PartitionConfig>(partition, p.partition, kPartitionFields);
  partition.finish();
  read_fields(r, p, fields.subspan(kParallelPartitionAt));
  r.finish();
}

void read_data(SectionReader r, DataConfig& d) {
  read_fields<DataConfig>(r, d, kDataFields);
  // digits' own defaults, where the key was not given
  if (d.type == DataType::kDigits && !r.has("val_fraction")) d.val_fraction = 0.2;
  if (d.type == DataType::kDigits && d.path.empty()) d.path = "data/digits.csv.gz";
  r.finish();
}

// A section whose keys are all its field table's.
template <typename Section>
void read_section(SectionReader r, Section& s, std::span<const Field<Section>> fields) {
  read_fields(r, s, fields);
  r.finish();
}

// A config.json a run wrote names its checkpoint.dir in full (resolve(): <train.out_dir>/checkpoints). When the
// overrides move train.out_dir and leave that derived checkpoint.dir alone, it follows (is cleared, so resolve()
// derives it again): `cleave train runs/a/config.json --set train.out_dir=runs/b` is a new run in runs/b, not one
// that saves into runs/a's checkpoints (which the fresh-run check would refuse). A checkpoint.dir of the file's
// that is not the derived one, or one an override sets, is kept as given.
void derived_checkpoint_dir_follows_out_dir(json& root, const json& file, const std::vector<std::string>& overrides) {
  for (const std::string& assignment : overrides) {
    if (assignment.starts_with("checkpoint.dir=") || assignment.starts_with("checkpoint=")) return;
  }
  const auto text_at = [](const json& j, const char* section, const char* key) -> std::optional<std::string> {
    if (!j.is_object() || !j.contains(section) || !j.at(section).is_object()) return std::nullopt;
    const json& s = j.at(section);
    if (!s.contains(key) || !s.at(key).is_string()) return std::nullopt;
    return s.at(key).get<std::string>();
  };
  const auto file_out = text_at(file, "train", "out_dir");
  const auto file_dir = text_at(file, "checkpoint", "dir");
  if (!file_out || !file_dir || *file_dir != (std::filesystem::path(*file_out) / "checkpoints").string()) return;
  const auto out = text_at(root, "train", "out_dir");
  if (out && *out != *file_out && text_at(root, "checkpoint", "dir") == file_dir) root["checkpoint"]["dir"] = "";
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
      throw Error(fmt::format("config {}: expected a JSON object {{...}} at the top level, got {}", state.origin, show_value(root)));
    }
    const json file = root;
    for (const std::string& assignment : overrides) apply_set_override(root, assignment, state);
    derived_checkpoint_dir_follows_out_dir(root, file, overrides);

    RunConfig c;
    SectionReader top(&root, "", state);
    read_model(top.section("model"), c.model);
    read_parallel(top.section("parallel"), c.parallel);
    read_section<BatchConfig>(top.section("batch"), c.batch, kBatchFields);
    read_section<OptimizerConfig>(top.section("optimizer"), c.optimizer, kOptimizerFields);
    read_section<TrainConfig>(top.section("train"), c.train, kTrainFields);
    read_section<CheckpointConfig>(top.section("checkpoint"), c.checkpoint, kCheckpointFields);
    read_data(top.section("data"), c.data);
    read_section<DeviceConfig>(top.section("device"), c.device, kDeviceFields);
    top.finish();
    report_unknown_keys(state);
    try {
      validate(c);
      check_named_files(c);
      check_keys_take_effect(c);
    } catch (const ConfigKeyError& e) {
      fail(state, e.key(), "{}", e.detail());
    }
    return c;
  } catch (const Error& e) {
    // Bad input (cleave exits ExitCode::kBadInput); names and keys quoted from it may hold control characters.
    throw InputError(escape_control(e.what()));
  }
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) {
    RunConfig c = parse_config("", "<defaults>", overrides);
    resolve_input_paths(c, path, "", overrides);
    return c;
  }
  std::error_code ec;
  const auto check = [&](bool ok, const std::string& what) {
    if (!ok) throw InputError(fmt::format("config {}: {}", path, what));
  };
  check(std::filesystem::exists(path, ec), "no such file");
  check(!std::filesystem::is_directory(path, ec), "is a directory, expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open for reading");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const bool blank = std::all_of(text.begin(), text.end(), [](unsigned char ch) { return std::isspace(ch); });
  check(!blank, "file is empty; write {} for all defaults");
  RunConfig c = parse_config(text, path, overrides);
  resolve_input_paths(c, path, text, overrides);
  return c;
}

// Input files named in a config file are relative to the file, so a config moves with its data; a --set value
// is a command-line value, relative to the working directory like --init-from, and so is a default. Either way the
// result is absolute, so the run's config.json reads the same files wherever it is trained from. Outputs
// (train.out_dir, checkpoint.dir) stay relative to the working directory: runs are made where the command runs.
void resolve_input_paths(RunConfig& c, const std::string& config_path, std::string_view file_text,
                         const std::vector<std::string>& overrides) {
  const auto overridden = [&](std::string_view key) {
    return std::any_of(overrides.begin(), overrides.end(), [&](const std::string& o) {
      return o.size() > key.size() && o.compare(0, key.size(), key) == 0 && o[key.size()] == '=';
    });
  };
  const nlohmann::json file = file_text.empty() ? nlohmann::json::object()
                                                : parse_json_strict(file_text, "config " + config_path);
  const auto data = file.find("data");
  const auto from_file = [&](const char* key) {
    return data != file.end() && data->is_object() && data->contains(key) &&
           !overridden(std::string("data.") + key);
  };
  const std::filesystem::path file_dir =
      config_path.empty() ? std::filesystem::path() : std::filesystem::absolute(config_path).parent_path();
  const std::filesystem::path work_dir = std::filesystem::current_path();
  const auto resolve = [&](std::string& p, bool in_file) {
    if (!p.empty() && std::filesystem::path(p).is_relative()) {
      p = ((in_file ? file_dir : work_dir) / p).lexically_normal().string();
    }
  };
  resolve(c.data.path, from_file("path"));
  resolve(c.data.val_path, from_file("val_path"));
  for (std::string& p : c.data.paths) resolve(p, from_file("paths"));
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

}  // namespace cleave::config
