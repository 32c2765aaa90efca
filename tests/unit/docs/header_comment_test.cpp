// Every source file opens with a comment (docs/architecture.md: what the file is and the invariant it keeps): the
// first line that is not blank, a `#!` line or `#pragma once` is a `//` or `/*` comment in C++ and CUDA, a `#`
// comment or a docstring in Python, a `#` comment in shell and CMake. And the comment says something: at least
// kLeastWords words, or it points to the file's own header (`foo.cpp` opening "See foo.hpp."), which then says it.
// What the comment says is the reviewer's to judge; this test only keeps a file from arriving without one, or with
// a label ("// Shape helpers.") in its place.
//
// The files come from the file system (the source folders below, every file with a source ending), not from a list
// here, so a new file is checked the day it is added.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cleave::docs_test::header_comment_test {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = CLEAVE_SOURCE_DIR;

// The folders whose sources must open with a comment.
const std::vector<std::string> kSourceFolders = {"engine", "kernels", "layers", "partition", "pipeline",
                                                 "tests",  "benchmarks", "examples", "scripts", "cmake"};

// Fewer words than this is a label, not a description (unless it points to the file's own header).
constexpr int kLeastWords = 6;

enum class Language { kCpp, kPython, kShell, kCmake, kOther };

Language language_of(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".cu" || ext == ".cuh") return Language::kCpp;
  if (ext == ".py") return Language::kPython;
  if (ext == ".sh") return Language::kShell;
  if (ext == ".cmake" || path.filename() == "CMakeLists.txt") return Language::kCmake;
  return Language::kOther;
}

std::string trim_left(const std::string& s) {
  const std::size_t first = s.find_first_not_of(" \t\r");
  return first == std::string::npos ? std::string() : s.substr(first);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool skipped_at_top(const std::string& text) {
  return text.empty() || starts_with(text, "#!") || starts_with(text, "#pragma once");
}

// The lines from the first that says something (not blank, not a shebang, not `#pragma once`), left-trimmed, up to
// `most` of them. Empty for an empty file.
std::vector<std::string> opening_lines(const fs::path& path, std::size_t most) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> lines;
  while (lines.size() < most && std::getline(in, line)) {
    const std::string text = trim_left(line);
    if (lines.empty() && skipped_at_top(text)) continue;
    lines.push_back(text);
  }
  return lines;
}

std::string first_meaningful_line(const fs::path& path) {
  const std::vector<std::string> lines = opening_lines(path, 1);
  return lines.empty() ? std::string() : lines.front();
}

bool opens_with_comment(Language language, const std::string& line) {
  switch (language) {
    case Language::kCpp: return starts_with(line, "//") || starts_with(line, "/*");
    case Language::kPython:
      return starts_with(line, "#") || starts_with(line, "\"\"\"") || starts_with(line, "r\"\"\"");
    case Language::kShell:
    case Language::kCmake: return starts_with(line, "#");
    case Language::kOther: return true;
  }
  return true;
}

// Whether `line` continues the opening comment that `first` began (for a docstring or a block comment: until the
// line that closes it).
bool continues_comment(Language language, const std::string& first, const std::string& line, bool& open_block) {
  if (open_block) {
    open_block = line.find(starts_with(first, "/*") ? "*/" : "\"\"\"") == std::string::npos;
    return true;
  }
  if (language == Language::kCpp) return starts_with(line, "//");
  return starts_with(line, "#") && !starts_with(line, "#!");
}

// The words of the comment a file opens with (its comment markers dropped); 0 when it opens with code.
int opening_comment_words(Language language, const fs::path& path) {
  const std::vector<std::string> lines = opening_lines(path, 200);
  if (lines.empty() || !opens_with_comment(language, lines.front())) return 0;
  const std::string& first = lines.front();
  const bool block = starts_with(first, "/*") || starts_with(first, "\"\"\"") || starts_with(first, "r\"\"\"");
  // A block that closes on its first line is the whole comment.
  bool open_block = block && first.find(starts_with(first, "/*") ? "*/" : "\"\"\"", 3) == std::string::npos;
  int words = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0 && !continues_comment(language, first, lines[i], open_block)) break;
    std::istringstream in(lines[i]);
    std::string word;
    while (in >> word) words += word.find_first_not_of("/*#\"r") != std::string::npos;
    if (block && !open_block) break;
  }
  return words;
}

// The file's own header (foo.cpp -> foo.hpp, foo.h or foo.cuh) when its opening names it, else empty.
fs::path named_own_header(const fs::path& path) {
  const std::string opening = first_meaningful_line(path);
  for (const char* ext : {".hpp", ".h", ".cuh"}) {
    fs::path header = path;
    header.replace_extension(ext);
    if (header != path && fs::is_regular_file(header) &&
        opening.find(header.filename().string()) != std::string::npos) {
      return header;
    }
  }
  return {};
}

// A comment of kLeastWords or more, or a pointer to the file's own header whose comment has as many.
bool says_what_it_is(Language language, const fs::path& path) {
  if (opening_comment_words(language, path) >= kLeastWords) return true;
  const fs::path header = named_own_header(path);
  return !header.empty() && opening_comment_words(Language::kCpp, header) >= kLeastWords;
}

// Every file with a source ending under the source folders, and the top-level CMakeLists.txt.
std::vector<fs::path> source_files() {
  std::vector<fs::path> files = {kRoot / "CMakeLists.txt"};
  for (const std::string& folder : kSourceFolders) {
    if (!fs::is_directory(kRoot / folder)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / folder)) {
      if (entry.is_regular_file() && language_of(entry.path()) != Language::kOther) files.push_back(entry.path());
    }
  }
  return files;
}

TEST(HeaderComments, EveryOpeningCommentSaysWhatTheFileIs) {
  std::vector<std::string> labels;
  for (const fs::path& path : source_files()) {
    const Language language = language_of(path);
    if (!opens_with_comment(language, first_meaningful_line(path))) continue;  // the test above names it
    if (!says_what_it_is(language, path)) labels.push_back(fs::relative(path, kRoot).string());
  }
  std::string list;
  for (const auto& path : labels) list += "\n  " + path;
  EXPECT_TRUE(labels.empty()) << labels.size() << " source file(s) open with a label rather than a description (fewer "
                              << "than " << kLeastWords << " words, and no pointer to a header of its own that has "
                              << "them): say what the file is and the invariant it keeps:" << list;
}

TEST(HeaderComments, TheWordCountReadsEachCommentForm) {
  const fs::path dir = fs::temp_directory_path() / ("cleave_header_comment_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  };
  EXPECT_EQ(opening_comment_words(Language::kCpp, write("a.cpp", "// Shape helpers.\n#include <x>\n")), 2);
  EXPECT_EQ(opening_comment_words(Language::kCpp, write("b.hpp", "// one two\n// three\n#pragma once\n")), 3);
  EXPECT_EQ(opening_comment_words(Language::kCpp, write("c.cpp", "/* one\n * two */\nint x;\n// later\n")), 2);
  EXPECT_EQ(opening_comment_words(Language::kPython, write("d.py", "#!/usr/bin/env python3\n\"\"\"One two.\n\nThree.\n\"\"\"\n"
                                                                  "import sys\n")),
            3);
  EXPECT_EQ(opening_comment_words(Language::kPython, write("e.py", "\"\"\"One two three.\"\"\"\n# not the header\n")), 3);
  EXPECT_EQ(opening_comment_words(Language::kShell, write("f.sh", "#!/bin/sh\n# one two\nset -e\n# later\n")), 2);
  EXPECT_EQ(opening_comment_words(Language::kCmake, write("CMakeLists.txt", "# one\n# two\nproject(x)\n")), 2);
  EXPECT_EQ(opening_comment_words(Language::kCpp, write("g.cpp", "#include <x>\n// late\n")), 0);
  // A pointer to the file's own header counts when the header says it; a short one without a header does not.
  write("shape.hpp", "// Shape: the extents of a tensor, at most eight.\n#pragma once\n");
  EXPECT_TRUE(says_what_it_is(Language::kCpp, write("shape.cpp", "// See shape.hpp.\n")));
  EXPECT_FALSE(says_what_it_is(Language::kCpp, write("shape_util.cpp", "// See shape.hpp.\n")));
  write("thin.hpp", "// Thin.\n#pragma once\n");
  EXPECT_FALSE(says_what_it_is(Language::kCpp, write("thin.cpp", "// See thin.hpp.\n")));
  fs::remove_all(dir);
}

TEST(HeaderComments, EverySourceFileOpensWithAComment) {
  for (const std::string& folder : kSourceFolders) {
    ASSERT_TRUE(fs::is_directory(kRoot / folder)) << (kRoot / folder) << " is not a folder";
  }
  std::vector<std::string> missing;
  int checked = 0;
  for (const fs::path& path : source_files()) {
    ++checked;
    if (!opens_with_comment(language_of(path), first_meaningful_line(path))) {
      missing.push_back(fs::relative(path, kRoot).string());
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
  EXPECT_FALSE(opens_with_comment(Language::kCmake, "cmake_minimum_required(VERSION 3.24)"));
  EXPECT_TRUE(opens_with_comment(Language::kCmake, "# Test suite."));
}

}  // namespace
}  // namespace cleave::docs_test::header_comment_test
