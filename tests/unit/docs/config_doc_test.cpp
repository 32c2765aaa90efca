// docs/config.md against the config code: every key the config writes (to_json, for each model type, before
// and after resolve) has a row in docs/config.md whose default is the code's default, and every key a row
// names is one the config reads (a --set of it parses).
//
// The key list comes from the writer, not from a list in this file, so a key added to the config without a
// row, a default changed without the page, or a row left for a removed key fails here.
// A row is `| `section.key` | type | `default` | meaning |`; the default is the first code span of the third
// cell, read as JSON (numbers compare by value: `1e-8` matches 1e-08); a default cell without a code span
// means "unset" and holds only for keys the unresolved config does not write (the batch sizes).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "unit/docs/config_doc_rows.hpp"
#include "unit/docs/markdown_table.hpp"
#include "engine/config/config.hpp"
#include "engine/config/fields.hpp"
#include "engine/core/error.hpp"

namespace cleave::docs_test::config_doc_test {
namespace {

using nlohmann::json;

const std::vector<std::string> kModelTypes = {"gpt", "mlp", "cnn", "llama", "moe"};

// Leaf key paths of a written config ("parallel.partition.method" -> value); arrays are leaves.
void flatten(const json& node, const std::string& prefix, std::map<std::string, json>& out) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) flatten(value, prefix.empty() ? key : prefix + "." + key, out);
  } else {
    out[prefix] = node;
  }
}

std::map<std::string, json> written(const config::RunConfig& c) {
  std::map<std::string, json> keys;
  flatten(json::parse(config::to_json(c)), "", keys);
  return keys;
}

struct CodeKeys {
  std::map<std::string, json> defaults;  // key -> default, for keys the unresolved config writes
  std::set<std::string> all;             // also the keys only resolve() fills in (batch sizes)
  std::map<std::string, std::string> model_type_of;  // model.* key -> a model.type that reads it
};

CodeKeys code_keys() {
  CodeKeys code;
  for (const auto& type : kModelTypes) {
    config::RunConfig c = config::parse_config("", "<defaults>", {"model.type=\"" + type + "\""});
    for (const auto& [key, value] : written(c)) {
      if (key.rfind("model.", 0) == 0 && key != "model.type") code.model_type_of.emplace(key, type);
      if (key == "model.type" && type != "gpt") continue;  // the default is the empty config's
      // llama shares gpt's keys; where its default differs (tie_embeddings false) the row says so in words,
      // checked by LlamaDefaultsThatDifferFromGptAreDocumented.
      if ((type == "llama" || type == "moe") && code.defaults.count(key) && code.defaults.at(key) != value) {
        code.all.insert(key);
        continue;
      }
      const auto [it, inserted] = code.defaults.emplace(key, value);
      EXPECT_TRUE(inserted || it->second == value)
          << key << " has default " << it->second.dump() << " for one model type and " << value.dump()
          << " for model.type " << type << "; docs/config.md gives one default per key";
      code.all.insert(key);
    }
    c.resolve(1);
    for (const auto& [key, value] : written(c)) code.all.insert(key);
  }
  return code;
}

struct DocRow {
  int line = 0;
  std::optional<json> default_value;  // nullopt: documented as unset
  std::string default_text;
};

std::map<std::string, DocRow> documented_keys() {
  const std::vector<ConfigDocRow> key_rows = config_doc_rows();
  EXPECT_FALSE(key_rows.empty()) << "docs/config.md is missing or has no key rows";
  std::map<std::string, DocRow> rows;
  for (const ConfigDocRow& r : key_rows) {
    DocRow row{r.line, std::nullopt, r.cells[2]};
    if (const auto value = first_code_span(r.cells[2])) {
      try {
        row.default_value = json::parse(*value);
      } catch (const json::exception&) {
        ADD_FAILURE() << "docs/config.md:" << r.line << ": default of " << r.key << " `" << *value
                      << "` is not JSON (write strings quoted, as in config.json)";
      }
    }
    EXPECT_TRUE(rows.emplace(r.key, row).second) << "docs/config.md:" << r.line << ": " << r.key << " listed twice";
  }
  return rows;
}

TEST(ConfigDoc, EveryKeyTheConfigWritesIsDocumentedWithItsDefault) {
  const CodeKeys code = code_keys();
  const auto rows = documented_keys();
  ASSERT_GT(code.all.size(), 40u) << "the config writer produced too few keys to be the real config";
  for (const auto& key : code.all) {
    const auto row = rows.find(key);
    if (row == rows.end()) {
      ADD_FAILURE() << "config key " << key << " has no row in docs/config.md";
      continue;
    }
    const auto def = code.defaults.find(key);
    if (def == code.defaults.end()) {
      EXPECT_FALSE(row->second.default_value)
          << "docs/config.md:" << row->second.line << ": " << key << " has no default in the code (unset until "
          << "resolve), but the page gives " << row->second.default_value->dump();
    } else if (!row->second.default_value) {
      ADD_FAILURE() << "docs/config.md:" << row->second.line << ": " << key << " defaults to "
                    << def->second.dump() << ", the page gives none (`" << row->second.default_text << "`)";
    } else {
      EXPECT_EQ(*row->second.default_value, def->second)
          << "docs/config.md:" << row->second.line << ": " << key << " defaults to " << def->second.dump()
          << " in the code, the page says " << row->second.default_value->dump();
    }
  }
}

TEST(ConfigDoc, EveryDocumentedKeyIsAccepted) {
  const CodeKeys code = code_keys();
  const auto rows = documented_keys();
  ASSERT_FALSE(rows.empty());
  config::RunConfig resolved = config::parse_config("");
  resolved.resolve(1);
  const auto resolved_keys = written(resolved);
  for (const auto& [key, row] : rows) {
    EXPECT_TRUE(code.all.count(key)) << "docs/config.md:" << row.line << ": " << key
                                     << " is not a key the config writes";
    // The reader's view: setting the key (to its documented default, or the resolved value for a key left
    // unset) must parse, under a model type that has it.
    std::string value = row.default_value ? row.default_value->dump() : "1";
    if (!row.default_value && resolved_keys.count(key)) value = resolved_keys.at(key).dump();
    const auto type = code.model_type_of.count(key) ? code.model_type_of.at(key) : std::string("gpt");
    try {
      (void)config::parse_config("", "docs/config.md", {"model.type=\"" + type + "\"", key + "=" + value});
    } catch (const Error& e) {
      ADD_FAILURE() << "docs/config.md:" << row.line << ": --set " << key << "=" << value
                    << " is refused: " << e.what();
    }
  }
}

// The keys of one field table (engine/config/fields.hpp) against the page and the writer: each "<section>.<key>" has
// a row in docs/config.md and a non-empty meaning, and written_keys (the writer's keys of that section) are the
// table's keys in order. `what` names the table in the messages ("parallel", "llama model").
template <typename Section, std::size_t N>
void expect_keys_documented_and_written(const std::string& section, const std::string& what,
                                        const std::array<config::Field<Section>, N>& fields,
                                        const std::vector<std::string>& written_keys,
                                        const std::map<std::string, DocRow>& rows) {
  std::vector<std::string> table_keys;
  for (const auto& field : fields) {
    const std::string key = section + "." + std::string(field.key);
    table_keys.emplace_back(field.key);
    EXPECT_TRUE(rows.count(key)) << "field table key " << key << " (" << what << ") has no row in docs/config.md";
    EXPECT_FALSE(field.meaning.empty()) << key << ": the field table gives no meaning";
  }
  EXPECT_EQ(written_keys, table_keys) << "the writer's " << what << " keys are not its field table's";
}

// A section's field table against the page and the writer's section of the default config.
template <typename Section, std::size_t N>
void expect_table_documented(const std::string& section, const std::array<config::Field<Section>, N>& fields,
                             const std::map<std::string, DocRow>& rows) {
  const auto tree = nlohmann::ordered_json::parse(config::to_json(config::parse_config("")));
  std::vector<std::string> written_keys;
  std::string pointer = "/" + section;  // "parallel.partition" -> "/parallel/partition"
  std::replace(pointer.begin(), pointer.end(), '.', '/');
  for (const auto& item : tree.at(nlohmann::ordered_json::json_pointer(pointer)).items()) {
    if (!item.value().is_object()) written_keys.push_back(item.key());  // parallel.partition has its own table
  }
  expect_keys_documented_and_written(section, section, fields, written_keys, rows);
}

TEST(ConfigDoc, EveryFieldTableKeyIsDocumentedWithAMeaning) {
  const auto rows = documented_keys();
  ASSERT_FALSE(rows.empty());
  expect_table_documented("parallel", config::kParallelFields, rows);
  expect_table_documented("parallel.partition", config::kPartitionFields, rows);
  expect_table_documented("optimizer", config::kOptimizerFields, rows);
  expect_table_documented("train", config::kTrainFields, rows);
  expect_table_documented("checkpoint", config::kCheckpointFields, rows);
  expect_table_documented("data", config::kDataFields, rows);
  expect_table_documented("device", config::kDeviceFields, rows);
}

// Each model type's table: its keys documented with a meaning, and the writer writes exactly them (after "type").
template <typename Section, std::size_t N>
void expect_model_table(const std::string& type, const std::array<config::Field<Section>, N>& fields,
                        const std::map<std::string, DocRow>& rows) {
  const auto tree =
      nlohmann::ordered_json::parse(config::to_json(config::parse_config(R"({"model": {"type": ")" + type + "\"}}")));
  std::vector<std::string> written_keys;
  for (const auto& item : tree.at("model").items()) {
    if (item.key() != "type") written_keys.push_back(item.key());
  }
  expect_keys_documented_and_written("model", type + " model", fields, written_keys, rows);
}

TEST(ConfigDoc, EveryModelTypeTableKeyIsDocumentedAndWritten) {
  const auto rows = documented_keys();
  ASSERT_FALSE(rows.empty());
  expect_model_table("gpt", config::kGptFields, rows);
  expect_model_table("mlp", config::kMlpFields, rows);
  expect_model_table("cnn", config::kCnnFields, rows);
  expect_model_table("llama", config::kLlamaFields, rows);
  expect_model_table("moe", config::kMoeFields, rows);
}

TEST(ConfigDoc, LlamaDefaultsThatDifferFromGptAreDocumented) {
  const auto rows = documented_keys();
  const auto llama = written(config::parse_config("", "<defaults>", {"model.type=\"llama\""}));
  const auto gpt = written(config::parse_config(""));
  int differing = 0;
  for (const auto& [key, value] : llama) {
    if (key == "model.type" || !gpt.count(key) || gpt.at(key) == value) continue;
    ++differing;
    ASSERT_TRUE(rows.count(key)) << key;
    EXPECT_NE(rows.at(key).default_text.find(fmt::format("`{}` (llama)", value.dump())), std::string::npos)
        << "docs/config.md:" << rows.at(key).line << ": " << key << " defaults to " << value.dump()
        << " for llama; the row should say `" << value.dump() << "` (llama)";
  }
  EXPECT_EQ(differing, 1);  // tie_embeddings
}

// batch: optional keys (unset ones are not written), so only the documentation and the meanings are checked here;
// the round trip of set ones is the config tests'.
TEST(ConfigDoc, BatchTableKeysAreDocumented) {
  const auto rows = documented_keys();
  for (const auto& field : config::kBatchFields) {
    const std::string key = "batch." + std::string(field.key);
    EXPECT_TRUE(rows.count(key)) << "field table key " << key << " has no row in docs/config.md";
    EXPECT_FALSE(field.meaning.empty()) << key;
  }
  const auto tree = nlohmann::ordered_json::parse(config::to_json(config::parse_config(
      R"({"batch": {"global_batch_size": 12, "micro_batch_size": 3, "gradient_accumulation_steps": 4}})")));
  std::vector<std::string> written;
  for (const auto& item : tree.at("batch").items()) written.push_back(item.key());
  EXPECT_EQ(written, (std::vector<std::string>{"global_batch_size", "micro_batch_size", "gradient_accumulation_steps"}));
}

}  // namespace
}  // namespace cleave::docs_test::config_doc_test
