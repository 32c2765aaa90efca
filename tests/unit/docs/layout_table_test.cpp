// The source layout tables against the tree: docs/architecture.md ("Source layout and dependencies") has a row
// naming every source folder (each folder under engine/ and kernels/, and layers/, partition/, pipeline/), and
// every folder a row names exists; README's "Source layout" row for `engine/` names each folder under engine/.
//
// The folder list comes from the file system, not from a list in this file, so a folder added without a row
// (engine/hf was one), or a row left for a folder that went, fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "unit/docs/markdown_table.hpp"

namespace cleave::docs_test::layout_table_test {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = CLEAVE_SOURCE_DIR;

// The rows of the first table after the heading line `heading` in `page`: each row's cells.
std::vector<std::vector<std::string>> table_after(const std::string& page, const std::string& heading) {
  std::istringstream in(page);
  std::string line;
  bool in_section = false;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) {
      if (in_section) break;
      in_section = trim(line) == heading;
      continue;
    }
    if (!in_section) continue;
    if (auto cells = table_cells(line)) {
      rows.push_back(*cells);
    } else if (!rows.empty()) {
      break;  // the table ended
    }
  }
  return rows;
}

// Every `code span` of `cell`.
std::vector<std::string> code_spans(const std::string& cell) {
  std::vector<std::string> spans;
  const std::regex span("`([^`]*)`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), span); it != std::sregex_iterator(); ++it) {
    spans.push_back((*it)[1].str());
  }
  return spans;
}

// The source folders the layout rule covers: engine/<x>/, kernels/<x>/, layers/, partition/, pipeline/.
std::set<std::string> source_folders() {
  std::set<std::string> folders = {"layers/", "partition/", "pipeline/"};
  for (const char* parent : {"engine", "kernels"}) {
    for (const auto& entry : fs::directory_iterator(kRoot / parent)) {
      if (entry.is_directory()) folders.insert(std::string(parent) + "/" + entry.path().filename().string() + "/");
    }
  }
  return folders;
}

TEST(LayoutTable, ArchitectureNamesEverySourceFolder) {
  const auto rows = table_after(read_text(kRoot / "docs" / "architecture.md"), "## Source layout and dependencies");
  ASSERT_GT(rows.size(), 10u) << "docs/architecture.md: the table under \"## Source layout and dependencies\" was not "
                                 "found";
  std::set<std::string> named;
  for (const auto& row : rows) {
    for (const std::string& span : code_spans(row.front())) named.insert(span);
  }
  const std::set<std::string> folders = source_folders();
  EXPECT_GT(folders.size(), 15u) << "the scan found too few folders to mean anything";
  for (const std::string& folder : folders) {
    EXPECT_TRUE(named.count(folder)) << "docs/architecture.md: the source layout table has no row for `" << folder
                                     << "` (add one saying what it holds)";
  }
  for (const std::string& name : named) {
    EXPECT_TRUE(fs::is_directory(kRoot / name)) << "docs/architecture.md: the source layout table names `" << name
                                                << "`, which is not a folder (remove or rename the row)";
  }
}

TEST(LayoutTable, ReadmeEngineRowNamesEveryEngineFolder) {
  const auto rows = table_after(read_text(kRoot / "README.md"), "## Source layout");
  const auto engine = std::find_if(rows.begin(), rows.end(), [](const auto& row) { return row.front() == "`engine/`"; });
  ASSERT_NE(engine, rows.end()) << "README.md: no `engine/` row under \"## Source layout\"";
  const std::string holds = engine->size() > 1 ? (*engine)[1] : "";
  for (const auto& entry : fs::directory_iterator(kRoot / "engine")) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(std::regex_search(holds, std::regex("\\b" + name + "\\b")))
        << "README.md: the `engine/` row of \"## Source layout\" does not name " << name << " (it says: " << holds << ")";
  }
}

// The table reader itself: a table after its heading is read, the next section's is not.
TEST(LayoutTable, ReaderTakesTheTableOfItsSection) {
  const std::string page = "# T\n## A\ntext\n\n| f | h |\n|---|---|\n| `x/`, `y/` | z |\n\n## B\n| `w/` | v |\n";
  const auto rows = table_after(page, "## A");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(code_spans(rows[2].front()), (std::vector<std::string>{"x/", "y/"}));
  EXPECT_TRUE(table_after(page, "## C").empty());
}

}  // namespace
}  // namespace cleave::docs_test::layout_table_test
