// ScratchDirTest: a gtest fixture that gives each test a fresh directory of its own under the system's temporary
// directory, named <prefix><pid> (so parallel test binaries do not meet), and removes it after the test, whatever
// the test wrote there. write(name, text) puts a file in it and returns the file's path.
//
// Derive with the prefix (`Fixture() : ScratchDirTest("cleave_<area>_test_") {}`); a fixture whose SetUp does more
// calls ScratchDirTest::SetUp() first.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace cleave::testing {

class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / (prefix_ + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace cleave::testing
