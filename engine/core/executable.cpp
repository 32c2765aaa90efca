// See executable.hpp.
#include "engine/core/executable.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace cleave {

bool can_execute(const std::string& program) {
  namespace fs = std::filesystem;
  const auto executable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.empty()) return false;
  if (program.find('/') != std::string::npos) return executable(program);
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (executable(fs::path(dir.empty() ? "." : dir) / program)) return true;
  }
  return false;
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

const char* why_not_executable(const std::string& program) {
  return program.find('/') != std::string::npos ? "not an executable file" : "not found in PATH";
}

}  // namespace cleave
