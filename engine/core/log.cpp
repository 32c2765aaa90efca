// Process-wide log sink. The rank prefix is the only state; it is written once at start-up.
#include "engine/core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cleave::log {
namespace {
int g_rank = 0;
int g_world = 1;

Level threshold() {
  static const Level level = [] {
    const char* env = std::getenv("CLEAVE_LOG_LEVEL");
    if (env == nullptr) return Level::kInfo;
    if (std::strcmp(env, "debug") == 0) return Level::kDebug;
    if (std::strcmp(env, "warn") == 0) return Level::kWarn;
    if (std::strcmp(env, "error") == 0) return Level::kError;
    return Level::kInfo;
  }();
  return level;
}
}  // namespace

void set_rank(int r, int n) {
  g_rank = r;
  g_world = n;
}
int rank() { return g_rank; }
int world_size() { return g_world; }
std::string prefix() { return g_world > 1 ? fmt::format("[rank {}/{}] ", g_rank, g_world) : std::string(); }
bool enabled(Level level) { return static_cast<int>(level) >= static_cast<int>(threshold()); }

void write(Level level, const std::string& message) {
  const char* tag = level == Level::kWarn ? "warning: " : level == Level::kError ? "error: " : "";
  std::string line = prefix() + tag + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace cleave::log
