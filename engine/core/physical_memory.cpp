// The machine's physical memory (see physical_memory.hpp).
#include "engine/core/physical_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace cleave {

std::optional<std::int64_t> mem_total_from_meminfo(std::string_view text) {
  constexpr std::string_view kKey = "MemTotal:";
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    std::int64_t kib = 0;
    const auto [rest, error] = std::from_chars(line.data(), line.data() + line.size(), kib);
    if (error != std::errc() || kib <= 0 || rest == line.data()) return std::nullopt;
    std::string_view unit(rest, static_cast<std::size_t>(line.data() + line.size() - rest));
    while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
    while (!unit.empty() && (unit.back() == ' ' || unit.back() == '\r')) unit.remove_suffix(1);
    if (unit != "kB") return std::nullopt;  // the kernel has written kB (KiB) since /proc/meminfo began
    if (kib > INT64_MAX / 1024) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

PhysicalMemory physical_memory() {
  std::ifstream in("/proc/meminfo");
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    if (const auto bytes = mem_total_from_meminfo(text.str())) return {*bytes, "MemTotal in /proc/meminfo"};
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && pages <= INT64_MAX / page) {
    return {static_cast<std::int64_t>(pages) * page, "sysconf(_SC_PHYS_PAGES) x _SC_PAGE_SIZE"};
  }
  return {};
}

}  // namespace cleave
