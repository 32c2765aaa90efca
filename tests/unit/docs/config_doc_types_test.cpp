// docs/config.md's type column against the field tables (engine/config/fields.hpp): each row's second cell
// names its key's kind (integer, number, boolean, string, bytes, a list), the lower bound the reader enforces
// (`≥ 1`, `> 0`, `-1`, `[0, ...`), every name of a choice key's enum as a quoted code span and no other, and, for a
// model key, in parentheses exactly the model types whose table holds it. config_doc_test.cpp checks the keys and
// defaults; this file the rest of what a user reads in the row before setting the key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>

#include "unit/docs/config_doc_rows.hpp"
#include "unit/docs/markdown_table.hpp"
#include "engine/config/enums.hpp"
#include "engine/config/fields.hpp"

namespace cleave::docs_test::config_doc_types_test {
namespace {

using config::Field;
using config::FieldKind;

struct TypeRow {
  int line = 0;
  std::string type;  // the second cell as written
};

std::map<std::string, TypeRow> type_cells() {
  std::map<std::string, TypeRow> rows;
  for (const ConfigDocRow& r : config_doc_rows()) rows.emplace(r.key, TypeRow{r.line, r.cells[1]});
  return rows;
}

// Every quoted code span of a cell (`"fp32"` -> fp32).
std::set<std::string> quoted_spans(const std::string& cell) {
  static const std::regex quoted("`\"([^\"`]*)\"`");
  std::set<std::string> names;
  for (std::sregex_iterator it(cell.begin(), cell.end(), quoted), end; it != end; ++it) names.insert((*it)[1]);
  return names;
}

// The names of a choice field's enum ({} for any other member type).
template <typename Section>
std::set<std::string> enum_names_of(const Field<Section>& field) {
  return std::visit(
      [](auto member) {
        using T = std::remove_cvref_t<decltype(std::declval<Section&>().*member)>;
        std::set<std::string> names;
        if constexpr (std::is_enum_v<T>) {
          for (const auto& entry : enum_names(T{})) names.emplace(entry.name);
        }
        return names;
      },
      field.member);
}

// What the type cell must say for a field's kind and lower bound ("" for no requirement).
template <typename Section>
std::vector<std::string> expected_words(const Field<Section>& field) {
  switch (field.kind) {
    case FieldKind::kInteger:
    case FieldKind::kIntegerList: {
      const std::string kind = field.kind == FieldKind::kInteger ? "integer" : "list of integers";
      if (field.min_int == -1) return {kind, "-1"};
      return {kind, fmt::format("≥ {}", field.min_int)};
    }
    case FieldKind::kUnsigned: return {"unsigned integer"};
    case FieldKind::kNumber:
      return {"number", field.min_open ? fmt::format("> {}", field.min) : fmt::format("≥ {}", field.min)};
    case FieldKind::kBoolean: return {"boolean"};
    case FieldKind::kString: return {"string"};
    case FieldKind::kChoice: return {};
    case FieldKind::kBytes: return {"bytes"};
    case FieldKind::kNumberPair: return {"[number, number]"};
    case FieldKind::kStringList: return {"array of strings"};
    case FieldKind::kNumberList: return {"array of numbers"};
  }
  return {};
}

// The other ways a row may write a kind and its bound: an interval (`in [0, 1)` for ≥ 0, `in (0, 1]` for > 0),
// a list of the values (`0 \| 1 \| 2 \| 3`: integers from 0) or the bound as an allowed value ahead of a
// narrower rule the validator adds (`number: 0, or ≥ 1 and ...` for ≥ 0).
bool written_otherwise(const std::string& cell, const std::string& word) {
  static const std::regex value_list(R"(^(-?[0-9]+)( \| -?[0-9]+)+$)");
  std::smatch match;
  if (std::regex_match(cell, match, value_list)) return word == "integer" || word == "≥ " + match[1].str();
  const std::string ge = "≥ ";
  if (word.rfind(ge, 0) == 0) {
    const std::string bound = word.substr(ge.size());
    return cell.find(fmt::format("[{},", bound)) != std::string::npos ||
           cell.find(fmt::format(": {}, or", bound)) != std::string::npos;
  }
  if (word.rfind("> ", 0) == 0) return cell.find(fmt::format("({},", word.substr(2))) != std::string::npos;
  return false;
}

template <typename Section, std::size_t N>
void expect_types(const std::string& section, const std::array<Field<Section>, N>& fields,
                  const std::map<std::string, TypeRow>& rows) {
  for (const auto& field : fields) {
    const std::string key = section + "." + std::string(field.key);
    const auto row = rows.find(key);
    if (row == rows.end()) continue;  // config_doc_test.cpp reports a missing row
    const std::string& cell = row->second.type;
    const std::string where = fmt::format("docs/config.md:{}: {} (type cell `{}`)", row->second.line, key, cell);
    for (const auto& word : expected_words(field)) {
      EXPECT_TRUE(cell.find(word) != std::string::npos || written_otherwise(cell, word))
          << where << " should say \"" << word << "\" (fields.hpp's kind and lower bound)";
    }
    if (field.kind == FieldKind::kChoice) {
      EXPECT_EQ(quoted_spans(cell), enum_names_of(field)) << where << ": the choices are not the enum's names";
    }
  }
}

TEST(ConfigDocTypes, EachRowNamesItsKindBoundAndChoices) {
  const auto rows = type_cells();
  ASSERT_GT(rows.size(), 90u) << "docs/config.md's tables were not read";
  expect_types("parallel", config::kParallelFields, rows);
  expect_types("parallel.partition", config::kPartitionFields, rows);
  expect_types("batch", config::kBatchFields, rows);
  expect_types("optimizer", config::kOptimizerFields, rows);
  expect_types("train", config::kTrainFields, rows);
  expect_types("checkpoint", config::kCheckpointFields, rows);
  expect_types("data", config::kDataFields, rows);
  expect_types("device", config::kDeviceFields, rows);
  config::for_each_model_fields([&](const auto& family) {
    for (const auto& field : family.fields) {
      std::array one{field};
      expect_types("model", one, rows);
    }
  });
}

// The model types a model row names in parentheses, e.g. `integer ≥ 1 (gpt, llama, moe)`.
std::set<std::string> named_model_types(const std::string& cell) {
  static const std::regex types(R"(\(([a-z]+(, [a-z]+)*)\)\s*$)");
  std::smatch match;
  std::set<std::string> names;
  if (!std::regex_search(cell, match, types)) return names;
  std::stringstream list(match[1].str());
  std::string name;
  while (std::getline(list, name, ',')) names.insert(trim(name));
  return names;
}

TEST(ConfigDocTypes, EachModelRowNamesTheModelTypesThatReadIt) {
  const auto rows = type_cells();
  std::map<std::string, std::set<std::string>> readers;  // model.key -> model types whose table holds it
  config::for_each_model_fields([&](const auto& family) {
    const std::string type(enum_name(family.type));
    for (const auto& field : family.fields) readers["model." + std::string(field.key)].insert(type);
  });
  ASSERT_GT(readers.size(), 20u);
  for (const auto& [key, types] : readers) {
    const auto row = rows.find(key);
    if (row == rows.end()) continue;  // config_doc_test.cpp reports a missing row
    EXPECT_EQ(named_model_types(row->second.type), types)
        << "docs/config.md:" << row->second.line << ": " << key << " (type cell `" << row->second.type
        << "`) should end with the model types whose field table holds it";
  }
}

}  // namespace
}  // namespace cleave::docs_test::config_doc_types_test
