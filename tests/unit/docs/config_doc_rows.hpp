// docs/config.md's key rows, read once for the config-doc tests (config_doc_test.cpp: keys and defaults;
// config_doc_types_test.cpp: the type cells): every table row of four or more cells whose first cell's first code span
// is a dotted key (`section.key`), in the page's order, with its cells as written.
//
// Invariant: the reader knows only that shape (a header row or another table's row is passed over), so what a row
// must say is each test's own rule.
#pragma once

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "unit/docs/markdown_table.hpp"

namespace cleave::docs_test {

struct ConfigDocRow {
  int line = 0;                    // 1-based, in docs/config.md
  std::string key;                 // "parallel.partition.method"
  std::vector<std::string> cells;  // the row's cells: key, type, default, meaning, ...
};

// The key rows of docs/config.md under CLEAVE_SOURCE_DIR; empty when the page is missing or empty.
inline std::vector<ConfigDocRow> config_doc_rows() {
  const std::string text = read_text(std::filesystem::path(CLEAVE_SOURCE_DIR) / "docs" / "config.md");
  std::vector<ConfigDocRow> rows;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    auto cells = table_cells(line);
    if (!cells || cells->size() < 4) continue;
    const auto key = first_code_span((*cells)[0]);
    if (!key || key->find('.') == std::string::npos) continue;
    rows.push_back({number, *key, std::move(*cells)});
  }
  return rows;
}

}  // namespace cleave::docs_test
