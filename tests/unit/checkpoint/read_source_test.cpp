// The checkpoint `cleave export` / `cleave generate` read when given a checkpoint root
// (engine/checkpoint/read_source.hpp): the newest (the `latest` pointer's, else the newest step), never an older one
// in place of a damaged newest; an unfinished save is passed over; the suggested command quotes what a shell would
// split.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "engine/checkpoint/read_source.hpp"

namespace cleave::checkpoint::read_source_test {
namespace {

namespace fs = std::filesystem;

TEST(CommandWith, ReplacesTheFirstMatchingWordAndQuotesForTheShell) {
  EXPECT_EQ(command_with({"cleave", "export", "run/checkpoints", "--out", "m.safetensors"}, "run/checkpoints",
                         "run/checkpoints/step_0000008"),
            "cleave export run/checkpoints/step_0000008 --out m.safetensors");
  EXPECT_EQ(command_with({"cleave", "generate", "ck", "--prompt", "it's a b", "--tokens", "4"}, "ck", "ck/step_0000002"),
            "cleave generate ck/step_0000002 --prompt 'it'\\''s a b' --tokens 4");
  EXPECT_EQ(command_with({"cleave", "export", "a", "--out", "a"}, "a", "b"), "cleave export b --out a");
  EXPECT_EQ(command_with({"x", ""}, "none", "y"), "x ''");
}

class ReadSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("cleave_read_source_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void step(const std::string& name, bool index) {
    fs::create_directories(root_ / name);
    if (index) std::ofstream(root_ / name / "index.json") << "{}";
  }
  fs::path root_;
};

TEST_F(ReadSourceTest, NewestStepEvenWhenDamagedAndTheLatestPointerFirst) {
  EXPECT_FALSE(resolve_read_source(root_.string()).has_value());  // no checkpoint at all
  step("step_0000004", true);
  step("step_0000008", false);  // no index.json: damaged, and still the one asked for
  step(".tmp-step_0000012", false);
  auto s = resolve_read_source(root_.string());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->dir, (root_ / "step_0000008").string());
  EXPECT_EQ(s->root, root_.string());
  EXPECT_NE(s->damaged.find("step_0000008: no index.json"), std::string::npos) << s->damaged;
  std::ofstream(root_ / "latest") << "step_0000004\n";  // a resume by hand from step 4 left step 8's branch
  s = resolve_read_source(root_.string());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->dir, (root_ / "step_0000004").string());
  EXPECT_TRUE(s->damaged.empty());
  // A step directory given by name is that one, not a root.
  s = resolve_read_source((root_ / "step_0000004").string());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->dir, (root_ / "step_0000004").string());
  EXPECT_TRUE(s->root.empty());
}

TEST_F(ReadSourceTest, DamagedNewestSaysSoWithoutAnOlderIntactOne) {
  step("step_0000004", false);
  step("step_0000008", false);
  const auto s = resolve_read_source(root_.string());
  ASSERT_TRUE(s.has_value());
  EXPECT_THROW(read_newest(*s, {"cleave", "export", root_.string()}, [] { return 0; }), CheckpointDamage);
  try {
    read_newest(*s, {"cleave", "export", root_.string()}, [] { return 0; });
  } catch (const CheckpointDamage& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("export: the newest checkpoint under " + root_.string() + " is damaged: step_0000008: no "
                        "index.json"), std::string::npos) << what;
    EXPECT_NE(what.find("no older checkpoint passes the quick check"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace cleave::checkpoint::read_source_test
