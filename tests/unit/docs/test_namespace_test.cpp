// Every test file keeps its tests and helpers in a namespace named after the file (`namespace cleave::X::<stem>`,
// cmake/CleaveTargets.cmake, docs/building.md): the test binaries compile their files in unity batches, where two
// files of one batch that define the same file-scope helper (`error_of`, `struct Shape`, `kTiny`) would clash, and
// which files share a batch moves whenever a file is added. A file named after its namespace never clashes,
// whatever the batches.
//
// The files come from the file system: every .cpp under tests/unit, tests/mpi, tests/e2e and tests/gpu that defines
// a gtest test (TEST, TEST_F, TEST_P) is checked; the mains and helper libraries without tests are not.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "unit/docs/markdown_table.hpp"

namespace cleave::docs_test::test_namespace_test {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = CLEAVE_SOURCE_DIR;
const std::vector<std::string> kTestFolders = {"tests/unit", "tests/mpi", "tests/e2e", "tests/gpu"};

struct TestFile {
  fs::path path;
  std::string text;
};

// The files that define a gtest test, with their text.
std::vector<TestFile> test_files() {
  const std::regex test_macro(R"((^|\n)(TEST|TEST_F|TEST_P)\()");
  std::vector<TestFile> files;
  for (const std::string& folder : kTestFolders) {
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / folder)) {
      if (!entry.is_regular_file() || entry.path().extension() != ".cpp") continue;
      std::string text = read_text(entry.path());
      if (std::regex_search(text, test_macro)) files.push_back({entry.path(), std::move(text)});
    }
  }
  return files;
}

// Each `namespace cleave...{` line of `text` that is not named after `stem` (empty when all are).
std::vector<std::string> namespaces_not_named_after(const std::string& text, const std::string& stem) {
  const std::regex opening(R"((^|\n)namespace (cleave[A-Za-z0-9_:]*) \{)");
  std::vector<std::string> wrong;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), opening); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[2];
    if (!name.ends_with("::" + stem)) wrong.push_back(name);
  }
  return wrong;
}

TEST(TestNamespace, TheRuleFindsAFileNotNamedAfterItsNamespace) {
  EXPECT_TRUE(namespaces_not_named_after("namespace cleave::planner::ep_plan_test {\n", "ep_plan_test").empty());
  EXPECT_EQ(namespaces_not_named_after("#include <x>\nnamespace cleave::planner {\n", "ep_plan_test"),
            std::vector<std::string>{"cleave::planner"});
  EXPECT_EQ(namespaces_not_named_after("namespace cleave::a::b_test {\n}\nnamespace cleave::a {\n", "b_test"),
            std::vector<std::string>{"cleave::a"});
  // Named after another file whose stem ends like this one's is still wrong.
  EXPECT_EQ(namespaces_not_named_after("namespace cleave::a::xb_test {\n", "b_test"),
            std::vector<std::string>{"cleave::a::xb_test"});
}

TEST(TestNamespace, EveryTestFileKeepsItsTestsInANamespaceNamedAfterIt) {
  const std::vector<TestFile> files = test_files();
  ASSERT_GE(files.size(), 200u) << "the test files were not found under " << kRoot;
  for (const TestFile& file : files) {
    const std::string stem = file.path.stem().string();
    const std::string where = fs::relative(file.path, kRoot).string();
    EXPECT_NE(file.text.find("namespace cleave"), std::string::npos)
        << where << ": its tests are in no namespace cleave::...::" << stem;
    for (const std::string& name : namespaces_not_named_after(file.text, stem)) {
      ADD_FAILURE() << where << ": `namespace " << name << "` should be `namespace "
                    << name << "::" << stem
                    << "` (test files compile in unity batches; cmake/CleaveTargets.cmake, docs/building.md)";
    }
  }
}

}  // namespace
}  // namespace cleave::docs_test::test_namespace_test
