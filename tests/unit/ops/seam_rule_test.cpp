// The op seam's dependency rule (docs/architecture.md): no file under layers/, engine/optim/, engine/train/ or
// pipeline/ includes a backend's kernel header (kernels/cpu/ or kernels/cuda/). cmake/CleaveSeam.cmake checks the
// same at configure time; this test catches a violation added after configuring. A self-check proves the
// scanner finds such an include (so the rule cannot pass by reading nothing).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace cleave::ops::seam_rule_test {
namespace {

namespace fs = std::filesystem;

const std::regex kBackendInclude(R"(#include\s+"kernels/(cpu|cuda)/)");

std::vector<std::string> violations_in(const fs::path& root, const std::vector<std::string>& dirs, int* scanned) {
  std::vector<std::string> found;
  for (const auto& dir : dirs) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh")) continue;
      ++*scanned;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        if (std::regex_search(line, kBackendInclude)) {
          found.push_back(fs::relative(entry.path(), root).string() + ":" + std::to_string(n) + ": " + line);
        }
      }
    }
  }
  return found;
}

TEST(SeamRule, NoLayerOptimizerTrainerOrPipelineFileIncludesABackendKernel) {
  int scanned = 0;
  const auto found = violations_in(CLEAVE_SOURCE_DIR, {"layers", "engine/optim", "engine/train", "pipeline"}, &scanned);
  EXPECT_GT(scanned, 50) << "the scan read too few files to mean anything";
  for (const auto& v : found) ADD_FAILURE() << v << "  (call kernels/ops/ops.hpp instead)";
}

TEST(SeamRule, ScannerFindsABackendInclude) {
  const fs::path root = fs::temp_directory_path() / "cleave_seam_rule_selfcheck";
  fs::remove_all(root);
  fs::create_directories(root / "layers");
  std::ofstream(root / "layers" / "bad.cpp") << "// x\n#include \"kernels/cpu/gemm.hpp\"\n";
  std::ofstream(root / "layers" / "good.cpp") << "#include \"kernels/ops/ops.hpp\"\n";
  int scanned = 0;
  const auto found = violations_in(root, {"layers"}, &scanned);
  EXPECT_EQ(scanned, 2);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("bad.cpp:2"), std::string::npos);
  fs::remove_all(root);
}

}  // namespace
}  // namespace cleave::ops::seam_rule_test
