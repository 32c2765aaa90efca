// The memory this process may use on its host: the smaller of the machine's physical memory (MemTotal of /proc/meminfo,
// else sysconf's page count x page size) and its cgroup's memory limit (a container's, a Kubernetes pod's, a Slurm
// job's: the OOM killer acts on it, however much the machine has). What a host can hold is checked against it before a
// run builds anything (run_plan/host_fit.hpp).
//
// The cgroup limit: the process's own cgroup from /proc/self/cgroup ("0::/path" on v2, "N:...memory...:/path" on v1),
// then the limit file of that cgroup and of every ancestor up to the mount's root (a limit set on a parent binds its
// children; a container's own mount shows only its subtree, so a path that is not there falls back to its parents):
// v2 /sys/fs/cgroup<path>/memory.max ("max": none), v1 /sys/fs/cgroup/memory<path>/memory.limit_in_bytes (2^62 and
// above: none; the kernel writes about 2^63 for "unlimited"). The smallest limit found binds.
// Invariant: this_process_memory_limit() is the only function here that looks at the machine (it reads files and calls
// sysconf); everything else is pure over file texts, so tests feed it recorded ones. A figure the OS does not give is
// 0 bytes ("unknown"), never a guess; an unreadable or malformed file is no limit.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cleave {

enum class CgroupVersion { kV1, kV2 };

// The process's cgroup per hierarchy, from /proc/self/cgroup; nullopt: not in that hierarchy.
struct CgroupPaths {
  std::optional<std::string> v2;      // the unified hierarchy's "0::" line
  std::optional<std::string> memory;  // the v1 memory controller's line
};

// One limit file to read: its path and how its text reads.
struct CgroupLimitFile {
  std::string path;  // "/sys/fs/cgroup/kubepods/pod1/memory.max"
  CgroupVersion version = CgroupVersion::kV2;
};

// What the process may use and where the figure came from.
struct MemoryLimit {
  std::int64_t bytes = 0;  // 0: unknown
  std::string source;      // "its physical memory, MemTotal in /proc/meminfo", "the cgroup limit in ..."
};

// A file's whole text, or nullopt when it cannot be read (the machine's reader, or a test's table).
using ReadText = std::function<std::optional<std::string>(const std::string& path)>;

// The "MemTotal:  <n> kB" line of /proc/meminfo's text, in bytes; nullopt when the line is missing or malformed.
std::optional<std::int64_t> mem_total_from_meminfo(std::string_view meminfo_text);

// The v2 and v1-memory cgroup paths in /proc/self/cgroup's text; a malformed line is skipped.
CgroupPaths cgroup_paths_from_proc_self_cgroup(std::string_view proc_self_cgroup_text);

// The limit files that bind `paths`, innermost first: each cgroup's own file, then its ancestors' up to the root's.
std::vector<CgroupLimitFile> cgroup_limit_files(const CgroupPaths& paths);

// A limit file's text in bytes; nullopt when it sets no limit ("max", v1's 2^62 and above) or is malformed or 0.
std::optional<std::int64_t> cgroup_limit_from_text(std::string_view text, CgroupVersion version);

// The memory this process may use (see above), reading every file through `read`; `sysconf_bytes` (0: unknown) is
// the physical memory when /proc/meminfo gives none. Pure given `read`.
MemoryLimit memory_limit(const ReadText& read, std::int64_t sysconf_bytes);

// This process's memory limit on this machine: memory_limit over the real files and sysconf.
MemoryLimit this_process_memory_limit();

}  // namespace cleave
