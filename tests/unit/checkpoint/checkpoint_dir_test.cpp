// Atomic checkpoint directories: a committed step appears with its files and `latest` names it; an
// uncommitted temporary directory (a crash mid-write) is never picked; pruning keeps the newest keep_last.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/core/error.hpp"

namespace cleave::checkpoint::checkpoint_dir_test {
namespace {

namespace fs = std::filesystem;

fs::path temp_root(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cleave_ckdir_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

void save(const fs::path& root, std::int64_t step) {
  const std::string tmp = begin_step_dir(root.string(), step);
  write_file_durable((fs::path(tmp) / "rank_00000.safetensors").string(), "payload");
  write_file_durable((fs::path(tmp) / "index.json").string(), "{}");
  commit_step_dir(root.string(), step);
}

TEST(CheckpointDir, CommitRenamesAndPointsLatest) {
  const fs::path root = temp_root("commit");
  EXPECT_FALSE(latest_step_dir(root.string()).has_value());
  save(root, 3);
  EXPECT_TRUE(fs::exists(root / "step_0000003" / "rank_00000.safetensors"));
  EXPECT_FALSE(fs::exists(root / ".tmp-step_0000003"));
  std::ifstream latest(root / "latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step_0000003");
  EXPECT_EQ(latest_step_dir(root.string()), (root / "step_0000003").string());
}

TEST(CheckpointDir, CrashBeforeCommitLeavesThePreviousOne) {
  const fs::path root = temp_root("crash");
  save(root, 2);
  const std::string tmp = begin_step_dir(root.string(), 4);  // a writer that died before the commit
  write_file_durable((fs::path(tmp) / "rank_00000.safetensors").string(), "half");
  EXPECT_EQ(latest_step_dir(root.string()), (root / "step_0000002").string());
  std::string msg;
  try {
    commit_step_dir(root.string(), 4);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("no index.json"), std::string::npos) << msg;
  // A stale pointer (the renamed directory exists, `latest` not yet rewritten) falls back to the newest.
  save(root, 5);
  write_file_durable((root / "latest").string(), "step_0000009\n");
  EXPECT_EQ(latest_step_dir(root.string()), (root / "step_0000005").string());
}

TEST(CheckpointDir, PruneKeepsTheNewest) {
  const fs::path root = temp_root("prune");
  for (int step : {1, 2, 3, 4}) save(root, step);
  EXPECT_EQ(prune_step_dirs(root.string(), 2), 2);
  const auto left = complete_step_dirs(root.string());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(fs::path(left[0]).filename(), "step_0000003");
  EXPECT_EQ(fs::path(left[1]).filename(), "step_0000004");
  save(root, 4);  // saving a step again replaces it
  EXPECT_EQ(complete_step_dirs(root.string()).size(), 2u);
}

}  // namespace
}  // namespace cleave::checkpoint::checkpoint_dir_test
