// A fresh start under --resume auto (engine/train/checkpoint/resume.hpp, keep_earlier_attempt): the earlier attempt's
// run files are moved, whole, into earlier_attempt_N/ (N the next free), and nothing else in the directory moves.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

#include "engine/train/checkpoint/resume.hpp"

namespace cleave::train::keep_earlier_attempt_test {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("cleave_keep_earlier_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string read(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(KeepEarlierAttempt, MovesEveryRunFileAsideAndNothingElse) {
  const fs::path dir = fresh_dir("moves");
  write(dir / "metrics.jsonl", "{\"step\": 1}\n{\"step\": 2}\n");
  write(dir / "config.json", "{}\n");
  write(dir / "run.json", "{\"ranks\": []}\n");
  write(dir / "report.html", "<html>");
  write(dir / "trace.json", "{}");
  write(dir / "config.before_step_4.json", "{\"old\": 1}");
  write(dir / "notes.txt", "the user's");
  fs::create_directories(dir / "checkpoints" / ".tmp-step_0000004");
  fs::create_directories(dir / "supervisor");

  const std::string kept = keep_earlier_attempt(dir.string());
  ASSERT_EQ(kept, (dir / "earlier_attempt_1").string());
  EXPECT_EQ(read(dir / "earlier_attempt_1" / "metrics.jsonl"), "{\"step\": 1}\n{\"step\": 2}\n");
  for (const char* name : {"metrics.jsonl", "config.json", "run.json", "report.html", "trace.json",
                           "config.before_step_4.json"}) {
    EXPECT_TRUE(fs::exists(dir / "earlier_attempt_1" / name)) << name;
    EXPECT_FALSE(fs::exists(dir / name)) << name;
  }
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_TRUE(fs::is_directory(dir / "checkpoints" / ".tmp-step_0000004"));
  EXPECT_TRUE(fs::is_directory(dir / "supervisor"));
  fs::remove_all(dir);
}

TEST(KeepEarlierAttempt, ASecondFreshStartTakesTheNextIndex) {
  const fs::path dir = fresh_dir("next");
  write(dir / "metrics.jsonl", "{\"step\": 1}\n");
  ASSERT_EQ(keep_earlier_attempt(dir.string()), (dir / "earlier_attempt_1").string());
  write(dir / "metrics.jsonl", "{\"step\": 2}\n");
  ASSERT_EQ(keep_earlier_attempt(dir.string()), (dir / "earlier_attempt_2").string());
  EXPECT_EQ(read(dir / "earlier_attempt_1" / "metrics.jsonl"), "{\"step\": 1}\n");
  EXPECT_EQ(read(dir / "earlier_attempt_2" / "metrics.jsonl"), "{\"step\": 2}\n");
  fs::remove_all(dir);
}

TEST(KeepEarlierAttempt, NothingToKeepCreatesNothing) {
  const fs::path dir = fresh_dir("none");
  write(dir / "notes.txt", "x");
  EXPECT_EQ(keep_earlier_attempt(dir.string()), "");
  EXPECT_FALSE(fs::exists(dir / "earlier_attempt_1"));
  EXPECT_EQ(keep_earlier_attempt((dir / "missing").string()), "");
  EXPECT_FALSE(fs::exists(dir / "missing"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cleave::train::keep_earlier_attempt_test
