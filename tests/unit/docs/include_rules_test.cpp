// The include rules of docs/architecture.md ("Source layout and dependencies") that the CMake targets cannot state,
// read from the source tree's `#include "..."` lines:
//  - no header includes itself through others (a cycle among the headers of engine/, kernels/, layers/,
//    partition/, pipeline/);
//  - one-way folder rules: engine/train/checkpoint/ takes the Trainer's parts (RankSetup, RankModel, StepTail) as
//    arguments and never includes the Trainer (engine/train/trainer.hpp, trainer_impl.hpp), which includes it; nor does
//    the evaluation (engine/train/evaluation.*), which the Trainer calls.
// The op seam's rule (no backend kernel header outside kernels/) is tests/unit/ops/seam_rule_test.cpp. Self-checks
// prove the scanners find a cycle and a forbidden include (so the rules cannot pass by reading nothing).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace cleave::docs_test::include_rules_test {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = CLEAVE_SOURCE_DIR;
const std::vector<std::string> kSourceFolders = {"engine", "kernels", "layers", "partition", "pipeline"};

bool is_source(const fs::path& path) {
  const std::string ext = path.extension().string();
  return ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".cu" || ext == ".cuh";
}

bool is_header(const fs::path& path) {
  const std::string ext = path.extension().string();
  return ext == ".hpp" || ext == ".h" || ext == ".cuh";
}

// The quoted includes of one file, as written ("engine/train/trainer.hpp").
std::vector<std::string> includes_of(const fs::path& path) {
  static const std::regex kInclude(R"(^\s*#\s*include\s+"([^"]+)\")");
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kInclude)) out.push_back(m[1].str());
  }
  return out;
}

// Every source file under `folders` of `root` (paths relative to `root`) -> its quoted includes.
using IncludeGraph = std::map<std::string, std::vector<std::string>>;
IncludeGraph include_graph(const fs::path& root, const std::vector<std::string>& folders) {
  IncludeGraph graph;
  for (const std::string& folder : folders) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      graph[fs::relative(entry.path(), root).generic_string()] = includes_of(entry.path());
    }
  }
  return graph;
}

// Each include cycle among the headers of `graph` (includes resolved from the root), as "a -> b -> a".
std::vector<std::string> header_cycles(const IncludeGraph& graph) {
  enum class Mark { kNew, kOnPath, kDone };
  std::map<std::string, Mark> mark;
  std::vector<std::string> path;
  std::vector<std::string> cycles;
  auto visit = [&](auto&& self, const std::string& file) -> void {
    mark[file] = Mark::kOnPath;
    path.push_back(file);
    for (const std::string& next : graph.at(file)) {
      if (!graph.contains(next) || !is_header(next)) continue;
      if (mark[next] == Mark::kOnPath) {
        std::string cycle;
        for (auto it = std::find(path.begin(), path.end(), next); it != path.end(); ++it) cycle += *it + " -> ";
        cycles.push_back(cycle + next);
      } else if (mark[next] == Mark::kNew) {
        self(self, next);
      }
    }
    path.pop_back();
    mark[file] = Mark::kDone;
  };
  for (const auto& [file, includes] : graph) {
    if (is_header(file) && mark[file] == Mark::kNew) visit(visit, file);
  }
  return cycles;
}

// A one-way rule: no file under `folder` includes any of `forbidden`.
struct FolderRule {
  std::string folder;
  std::vector<std::string> forbidden;
  std::string why;
};

const std::vector<FolderRule> kFolderRules = {
    {"engine/train/checkpoint/",
     {"engine/train/trainer.hpp", "engine/train/trainer_impl.hpp"},
     "the Trainer includes the checkpoint code; pass it the parts (RankSetup, RankModel, StepTail, RunParts)"},
    {"engine/train/evaluation.",
     {"engine/train/trainer.hpp", "engine/train/trainer_impl.hpp"},
     "the Trainer calls the evaluation; it takes RankSetup and the Executor and returns an EvalResult"},
};

std::vector<std::string> rule_violations(const IncludeGraph& graph, const std::vector<FolderRule>& rules) {
  std::vector<std::string> found;
  for (const FolderRule& rule : rules) {
    for (const auto& [file, includes] : graph) {
      if (!file.starts_with(rule.folder)) continue;
      for (const std::string& include : includes) {
        if (std::find(rule.forbidden.begin(), rule.forbidden.end(), include) != rule.forbidden.end()) {
          found.push_back(file + " includes " + include + " (" + rule.why + ")");
        }
      }
    }
  }
  return found;
}

TEST(IncludeRules, NoHeaderIncludesItselfThroughOthers) {
  const IncludeGraph graph = include_graph(kRoot, kSourceFolders);
  EXPECT_GT(graph.size(), 300u) << "the scan read too few files to mean anything";
  for (const std::string& cycle : header_cycles(graph)) ADD_FAILURE() << "include cycle: " << cycle;
}

TEST(IncludeRules, FolderRulesHold) {
  const IncludeGraph graph = include_graph(kRoot, kSourceFolders);
  int ruled = 0;
  for (const auto& [file, includes] : graph) ruled += file.starts_with(kFolderRules[0].folder) ? 1 : 0;
  EXPECT_GT(ruled, 10) << "no files under " << kFolderRules[0].folder;
  for (const std::string& v : rule_violations(graph, kFolderRules)) ADD_FAILURE() << v;
}

TEST(IncludeRules, ScannersFindACycleAndAForbiddenInclude) {
  const fs::path root = fs::temp_directory_path() / "cleave_include_rules_selfcheck";
  fs::remove_all(root);
  fs::create_directories(root / "engine" / "a" / "b");
  std::ofstream(root / "engine" / "a" / "top.hpp") << "// x\n#include \"engine/a/b/low.hpp\"\n";
  std::ofstream(root / "engine" / "a" / "b" / "low.hpp") << "// x\n  #  include \"engine/a/top.hpp\"\n";
  std::ofstream(root / "engine" / "a" / "b" / "ok.cpp") << "#include \"engine/a/b/low.hpp\"\n";
  const IncludeGraph graph = include_graph(root, {"engine"});
  EXPECT_EQ(graph.size(), 3u);
  const std::vector<std::string> cycles = header_cycles(graph);
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_EQ(cycles[0], "engine/a/b/low.hpp -> engine/a/top.hpp -> engine/a/b/low.hpp");
  const std::vector<std::string> found = rule_violations(graph, {{"engine/a/b/", {"engine/a/top.hpp"}, "why"}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "engine/a/b/low.hpp includes engine/a/top.hpp (why)");
  fs::remove_all(root);
}

}  // namespace
}  // namespace cleave::docs_test::include_rules_test
