// The memory this process may use on its host (see physical_memory.hpp).
#include "engine/core/physical_memory.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "engine/core/allocator.hpp"

namespace cleave {
namespace {

constexpr std::string_view kMemTotalSource = "MemTotal in /proc/meminfo";
constexpr std::string_view kSysconfSource = "sysconf(_SC_PHYS_PAGES) x _SC_PAGE_SIZE";
// v1 writes PAGE_COUNTER_MAX x the page size (about 2^63) for "unlimited"; no machine has 2^62 bytes.
constexpr std::uint64_t kV1Unlimited = std::uint64_t{1} << 62;

// Calls `each` with every line of `text` (no newline; a last line without one included).
template <typename Each>
void for_each_line(std::string_view text, Each each) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    each(text.substr(at, end - at));
    at = end + 1;
  }
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// The whole of `s` as a decimal count; nullopt when anything else is in it.
std::optional<std::uint64_t> whole_number(std::string_view s) {
  std::uint64_t value = 0;
  const auto [rest, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc() || rest != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

bool names_memory(std::string_view controllers) {
  bool found = false;
  for (std::size_t at = 0; at <= controllers.size();) {
    const std::size_t end = std::min(controllers.find(',', at), controllers.size());
    found = found || controllers.substr(at, end - at) == "memory";
    at = end + 1;
  }
  return found;
}

// `path` and its ancestors, innermost first, each without a trailing '/' ("" for the root). A path that is not
// absolute or climbs ("..", a cgroup outside this process's namespace) is the root alone.
std::vector<std::string> self_and_ancestors(const std::string& path) {
  std::vector<std::string> out;
  std::string p = path;
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (!path.starts_with('/') || p.find("/..") != std::string::npos) p.clear();
  for (;;) {
    out.push_back(p);
    if (p.empty()) return out;
    p.erase(p.rfind('/'));
  }
}

// The physical memory: MemTotal, else sysconf's figure; {0, ""} when neither is known.
MemoryLimit physical(const ReadText& read, std::int64_t sysconf_bytes) {
  if (const auto text = read("/proc/meminfo")) {
    if (const auto bytes = mem_total_from_meminfo(*text)) return {*bytes, std::string(kMemTotalSource)};
  }
  if (sysconf_bytes > 0) return {sysconf_bytes, std::string(kSysconfSource)};
  return {};
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return text.str();
}

}  // namespace

std::optional<std::int64_t> mem_total_from_meminfo(std::string_view text) {
  constexpr std::string_view kKey = "MemTotal:";
  std::optional<std::int64_t> found;
  bool seen = false;
  for_each_line(text, [&](std::string_view line) {
    if (seen || !line.starts_with(kKey)) return;
    seen = true;
    line = trimmed(line.substr(kKey.size()));
    std::int64_t kib = 0;
    const auto [rest, error] = std::from_chars(line.data(), line.data() + line.size(), kib);
    if (error != std::errc() || kib <= 0 || rest == line.data()) return;
    const std::string_view unit = trimmed(std::string_view(rest, line.data() + line.size() - rest));
    if (unit != "kB") return;  // the kernel has written kB (KiB) since /proc/meminfo began
    if (kib > INT64_MAX / 1024) return;
    found = kib * 1024;
  });
  return found;
}

CgroupPaths cgroup_paths_from_proc_self_cgroup(std::string_view text) {
  CgroupPaths paths;
  for_each_line(text, [&](std::string_view line) {
    // "hierarchy-id:controllers:path"; the path may hold ':' itself.
    const std::size_t first = line.find(':');
    if (first == std::string_view::npos) return;
    const std::size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) return;
    const std::string_view id = line.substr(0, first), controllers = line.substr(first + 1, second - first - 1);
    const std::string path(trimmed(line.substr(second + 1)));
    if (!path.starts_with('/')) return;
    if (id == "0" && controllers.empty()) {
      paths.v2 = path;
    } else if (names_memory(controllers)) {
      paths.memory = path;
    }
  });
  return paths;
}

std::vector<CgroupLimitFile> cgroup_limit_files(const CgroupPaths& paths) {
  std::vector<CgroupLimitFile> files;
  if (paths.v2) {
    for (const std::string& p : self_and_ancestors(*paths.v2)) {
      files.push_back({"/sys/fs/cgroup" + p + "/memory.max", CgroupVersion::kV2});
    }
  }
  if (paths.memory) {
    for (const std::string& p : self_and_ancestors(*paths.memory)) {
      files.push_back({"/sys/fs/cgroup/memory" + p + "/memory.limit_in_bytes", CgroupVersion::kV1});
    }
  }
  return files;
}

std::optional<std::int64_t> cgroup_limit_from_text(std::string_view text, CgroupVersion version) {
  const std::string_view value = trimmed(text);
  if (version == CgroupVersion::kV2 && value == "max") return std::nullopt;
  const auto bytes = whole_number(value);
  if (!bytes || *bytes == 0) return std::nullopt;
  if (version == CgroupVersion::kV1 && *bytes >= kV1Unlimited) return std::nullopt;
  if (*bytes > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<std::int64_t>(*bytes);
}

MemoryLimit memory_limit(const ReadText& read, std::int64_t sysconf_bytes) {
  const MemoryLimit machine = physical(read, sysconf_bytes);
  MemoryLimit out = machine;
  if (!machine.source.empty()) out.source = "its physical memory, " + machine.source;
  const auto self = read("/proc/self/cgroup");
  if (!self) return out;
  std::optional<std::int64_t> tightest;
  std::string tightest_file;
  for (const CgroupLimitFile& file : cgroup_limit_files(cgroup_paths_from_proc_self_cgroup(*self))) {
    const auto text = read(file.path);
    const auto bytes = text ? cgroup_limit_from_text(*text, file.version) : std::nullopt;
    if (bytes && (!tightest || *bytes < *tightest)) tightest = bytes, tightest_file = file.path;
  }
  if (!tightest || (machine.bytes > 0 && *tightest >= machine.bytes)) return out;
  const std::string below = machine.bytes > 0 ? fmt::format("below its physical memory {} ({})",
                                                            format_bytes(machine.bytes), machine.source)
                                              : "its physical memory unknown";
  return {*tightest, fmt::format("the cgroup limit in {}, {}", tightest_file, below)};
}

MemoryLimit this_process_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const std::int64_t sysconf_bytes =
      pages > 0 && page > 0 && pages <= INT64_MAX / page ? static_cast<std::int64_t>(pages) * page : 0;
  return memory_limit(read_text_file, sysconf_bytes);
}

}  // namespace cleave
