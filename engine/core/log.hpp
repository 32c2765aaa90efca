// Logging with a rank prefix: "[rank r/N] message" on stderr when N > 1, plain otherwise.
//
// The rank is set once per process by the launcher code; everything else just calls log_info/log_warn.
// Verbosity is controlled by CLEAVE_LOG_LEVEL (debug, info, warn, error).
#pragma once

#include <fmt/format.h>

#include <string>

namespace cleave::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_rank(int rank, int world_size);
int rank();
int world_size();
std::string prefix();  // "[rank r/N] " or "" for a single-rank run
bool enabled(Level level);
void write(Level level, const std::string& message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kDebug)) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace cleave::log
