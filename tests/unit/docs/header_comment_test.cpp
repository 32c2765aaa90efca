// Every source file opens with a comment (docs/architecture.md: what the file is and the invariant it keeps): the
// first line that is not blank, a `#!` line or `#pragma once` is a `//` or `/*` comment in C++ and CUDA, a `#`
// comment or a docstring in Python, a `#` comment in shell. What the comment says is the reviewer's to judge; this
// test only keeps a file from arriving without one.
//
// The files come from the file system (the source folders below, every file with a source ending), not from a list
// here, so a new file is checked the day it is added.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cleave::docs_test {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = CLEAVE_SOURCE_DIR;

// The folders whose sources must open with a comment.
const std::vector<std::string> kSourceFolders = {"engine", "kernels", "layers", "partition", "pipeline",
                                                 "tests",  "benchmarks", "examples", "scripts"};

enum class Language { kCpp, kPython, kShell, kOther };

Language language_of(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".cu" || ext == ".cuh") return Language::kCpp;
  if (ext == ".py") return Language::kPython;
  if (ext == ".sh") return Language::kShell;
  return Language::kOther;
}

std::string trim_left(const std::string& s) {
  const std::size_t first = s.find_first_not_of(" \t\r");
  return first == std::string::npos ? std::string() : s.substr(first);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The first line that says something: not blank, not a shebang, not `#pragma once`. Empty for an empty file.
std::string first_meaningful_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const std::string text = trim_left(line);
    if (text.empty() || starts_with(text, "#!") || starts_with(text, "#pragma once")) continue;
    return text;
  }
  return {};
}

bool opens_with_comment(Language language, const std::string& line) {
  switch (language) {
    case Language::kCpp: return starts_with(line, "//") || starts_with(line, "/*");
    case Language::kPython:
      return starts_with(line, "#") || starts_with(line, "\"\"\"") || starts_with(line, "r\"\"\"");
    case Language::kShell: return starts_with(line, "#");
    case Language::kOther: return true;
  }
  return true;
}

TEST(HeaderComments, EverySourceFileOpensWithAComment) {
  std::vector<std::string> missing;
  int checked = 0;
  for (const std::string& folder : kSourceFolders) {
    ASSERT_TRUE(fs::is_directory(kRoot / folder)) << (kRoot / folder) << " is not a folder";
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / folder)) {
      if (!entry.is_regular_file()) continue;
      const Language language = language_of(entry.path());
      if (language == Language::kOther) continue;
      ++checked;
      if (!opens_with_comment(language, first_meaningful_line(entry.path()))) {
        missing.push_back(fs::relative(entry.path(), kRoot).string());
      }
    }
  }
  EXPECT_GT(checked, 500) << "the walk found too few sources under " << kRoot << ": is CLEAVE_SOURCE_DIR right?";
  std::string list;
  for (const auto& path : missing) list += "\n  " + path;
  EXPECT_TRUE(missing.empty()) << missing.size() << " source file(s) open without a comment (say what the file is "
                               << "and the invariant it keeps, in a few lines at the top):" << list;
}

TEST(HeaderComments, TheCheckRefusesAFileThatOpensWithCode) {
  EXPECT_FALSE(opens_with_comment(Language::kCpp, "#include <vector>"));
  EXPECT_FALSE(opens_with_comment(Language::kPython, "import sys"));
  EXPECT_FALSE(opens_with_comment(Language::kShell, "set -euo pipefail"));
  EXPECT_FALSE(opens_with_comment(Language::kCpp, ""));  // an empty file says nothing
  EXPECT_TRUE(opens_with_comment(Language::kCpp, "// Executor: a plain interpreter"));
  EXPECT_TRUE(opens_with_comment(Language::kPython, "\"\"\"Lists the longest functions.\"\"\""));
}

}  // namespace
}  // namespace cleave::docs_test
