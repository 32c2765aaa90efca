// Reading the documentation's Markdown for the docs tests: table rows split into cells, the first
// `backticked` span of a cell, and every link target of a file.
//
// Invariant: the readers take the Markdown as written, with no knowledge of what a page means, so a test
// built on them fails when a page drifts from the code rather than when the page changes its prose.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace cleave::docs_test {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// The cells of a table row `| a | b \| c | d |` ({"a", "b | c", "d"}); nullopt for a line that is not a row.
inline std::optional<std::vector<std::string>> table_cells(const std::string& line) {
  const std::string row = trim(line);
  if (row.size() < 2 || row.front() != '|' || row.back() != '|') return std::nullopt;
  std::vector<std::string> cells;
  std::string cell;
  for (std::size_t i = 1; i + 1 < row.size(); ++i) {
    if (row[i] == '\\' && row[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (row[i] == '|') {
      cells.push_back(trim(cell));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  cells.push_back(trim(cell));
  return cells;
}

// The text of the first `code span` in `cell`, or nullopt when it has none.
inline std::optional<std::string> first_code_span(const std::string& cell) {
  const auto open = cell.find('`');
  if (open == std::string::npos) return std::nullopt;
  const auto close = cell.find('`', open + 1);
  if (close == std::string::npos) return std::nullopt;
  return cell.substr(open + 1, close - open - 1);
}

struct Link {
  int line = 0;
  std::string target;  // as written: "docs/x.md#part", "https://...", "../y.md"
};

// Every inline link target `[text](target)` and reference definition `[name]: target` outside code spans and
// fenced code blocks.
inline std::vector<Link> links_in(const std::string& markdown) {
  static const std::regex inline_link(R"(\]\(([^)\s]+)(\s+"[^"]*")?\))");
  static const std::regex reference(R"(^\s*\[[^\]]+\]:\s*(\S+))");
  std::vector<Link> links;
  std::istringstream lines(markdown);
  std::string line;
  bool in_fence = false;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (trim(line).rfind("```", 0) == 0) {
      in_fence = !in_fence;
      continue;
    }
    if (in_fence) continue;
    std::string prose;  // the line with its code spans blanked
    bool in_code = false;
    for (const char c : line) {
      if (c == '`') in_code = !in_code;
      prose += in_code || c == '`' ? ' ' : c;
    }
    for (std::sregex_iterator it(prose.begin(), prose.end(), inline_link), end; it != end; ++it) {
      links.push_back({number, (*it)[1].str()});
    }
    std::smatch match;
    if (std::regex_search(prose, match, reference)) links.push_back({number, match[1].str()});
  }
  return links;
}

}  // namespace cleave::docs_test
