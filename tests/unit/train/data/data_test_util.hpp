// Helpers for the data-loader tests: a per-test temporary directory, file writers for each format, and a
// config pointing at a file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"

namespace cleave::train::test_util {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("cleave_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const void* data, std::size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

inline void write_uint16(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  write_bytes(path, tokens.data(), tokens.size() * 2);
}

// llm.c shard: header {magic, version, count} (count defaults to tokens.size()), then tokens.
inline void write_llmc(const std::string& path, const std::vector<std::uint16_t>& tokens, std::int32_t magic = 20240520,
                       std::int32_t version = 1, std::int64_t count = -1) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(count < 0 ? static_cast<std::int64_t>(tokens.size()) : count);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

// Tokens whose value is their position (so a window reveals its offset), modulo `modulo`.
inline std::vector<std::uint16_t> position_tokens(std::int64_t n, std::int64_t modulo = 60000) {
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) tokens[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(i % modulo);
  return tokens;
}

// Expects `body` to throw cleave::Error with a one-line message containing every needle.
template <typename F>
void expect_error(F&& body, const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const auto& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << "message lacks '" << needle << "': " << message;
    }
  }
}

}  // namespace cleave::train::test_util
