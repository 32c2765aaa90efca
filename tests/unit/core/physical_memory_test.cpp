// The memory this process may use (engine/core/physical_memory.hpp), from recorded texts only (no test reads this
// machine's files): /proc/meminfo's MemTotal in bytes; the cgroup paths in /proc/self/cgroup (v2 and v1 memory); the
// limit files of a cgroup and its ancestors; v2 memory.max ("max": none) and v1 memory.limit_in_bytes (about 2^63:
// none); and memory_limit over a table of files: the smaller of MemTotal and the tightest cgroup limit, named by its
// file, with an unreadable or malformed file no limit. A missing or malformed figure is none, never a guess.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/core/physical_memory.hpp"

namespace cleave::physical_memory_test {
namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;
constexpr const char* kMeminfo64GiB = "MemTotal:       67108864 kB\nMemFree:         1024 kB\n";
constexpr const char* kPhysical64GiB = "its physical memory, MemTotal in /proc/meminfo";

// A machine made of files: `files` by path; any other path cannot be read.
ReadText files_of(std::map<std::string, std::string> files) {
  return [files = std::move(files)](const std::string& path) -> std::optional<std::string> {
    const auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

TEST(PhysicalMemory, MemTotalIsReadInKibibytes) {
  const char* text =
      "MemTotal:       24584380 kB\n"
      "MemFree:        20193216 kB\n"
      "MemAvailable:   23041764 kB\n";
  EXPECT_EQ(mem_total_from_meminfo(text), std::int64_t{24584380} * 1024);
  // Not the first line, tabs, no trailing newline.
  EXPECT_EQ(mem_total_from_meminfo("MemFree: 5 kB\nMemTotal:\t7 kB"), 7 * 1024);
}

TEST(PhysicalMemory, AMissingOrMalformedLineGivesNoFigure) {
  EXPECT_FALSE(mem_total_from_meminfo(""));
  EXPECT_FALSE(mem_total_from_meminfo("MemFree: 5 kB\n"));
  EXPECT_FALSE(mem_total_from_meminfo("MemTotal: lots kB\n"));
  EXPECT_FALSE(mem_total_from_meminfo("MemTotal: 0 kB\n"));
  EXPECT_FALSE(mem_total_from_meminfo("MemTotal: 12 MB\n"));  // a unit the kernel does not write
  EXPECT_FALSE(mem_total_from_meminfo("MemTotal: 99999999999999999999 kB\n"));  // past int64
  EXPECT_FALSE(mem_total_from_meminfo(" MemTotal: 12 kB\n"));  // not at the line's start
}

TEST(PhysicalMemory, TheCgroupPathsAreReadPerHierarchy) {
  // v2 alone (a systemd host, a Kubernetes pod with its own cgroup namespace).
  CgroupPaths p = cgroup_paths_from_proc_self_cgroup("0::/kubepods.slice/pod1/cri-abc.scope\n");
  EXPECT_EQ(p.v2, "/kubepods.slice/pod1/cri-abc.scope");
  EXPECT_FALSE(p.memory);
  // Hybrid: v1 controllers beside an empty unified line; memory may share its line with other controllers.
  p = cgroup_paths_from_proc_self_cgroup(
      "9:name=systemd:/\n5:devices:/\n4:cpu,memory:/slurm/uid_0/job_7/step_0\n3:memsomething:/other\n0::/\n");
  EXPECT_EQ(p.v2, "/");
  EXPECT_EQ(p.memory, "/slurm/uid_0/job_7/step_0");
  // A path holding ':' is the rest of the line; malformed lines and relative paths are skipped.
  p = cgroup_paths_from_proc_self_cgroup("garbage\n7:memory\n6:memory:relative\n0::/a:b\n");
  EXPECT_EQ(p.v2, "/a:b");
  EXPECT_FALSE(p.memory);
  EXPECT_FALSE(cgroup_paths_from_proc_self_cgroup("").v2);
}

TEST(PhysicalMemory, TheLimitFilesAreTheCgroupsAndItsAncestorsInnermostFirst) {
  const auto paths_of = [](const std::vector<CgroupLimitFile>& files) {
    std::vector<std::string> out;
    for (const CgroupLimitFile& f : files) out.push_back(f.path);
    return out;
  };
  const std::vector<CgroupLimitFile> v2 = cgroup_limit_files({"/kubepods/pod1/ctr", std::nullopt});
  EXPECT_EQ(paths_of(v2), (std::vector<std::string>{"/sys/fs/cgroup/kubepods/pod1/ctr/memory.max",
                                                    "/sys/fs/cgroup/kubepods/pod1/memory.max",
                                                    "/sys/fs/cgroup/kubepods/memory.max",
                                                    "/sys/fs/cgroup/memory.max"}));
  for (const CgroupLimitFile& f : v2) EXPECT_EQ(f.version, CgroupVersion::kV2) << f.path;
  const std::vector<CgroupLimitFile> v1 = cgroup_limit_files({std::nullopt, "/docker/abc/"});
  EXPECT_EQ(paths_of(v1), (std::vector<std::string>{"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
                                                    "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes",
                                                    "/sys/fs/cgroup/memory/memory.limit_in_bytes"}));
  for (const CgroupLimitFile& f : v1) EXPECT_EQ(f.version, CgroupVersion::kV1) << f.path;
  // The root alone; a path outside the namespace ("/../..") is the mount's root alone; both hierarchies, v2 first.
  EXPECT_EQ(paths_of(cgroup_limit_files({"/", std::nullopt})), std::vector<std::string>{"/sys/fs/cgroup/memory.max"});
  EXPECT_EQ(paths_of(cgroup_limit_files({"/../../x", std::nullopt})),
            std::vector<std::string>{"/sys/fs/cgroup/memory.max"});
  EXPECT_EQ(paths_of(cgroup_limit_files({"/", "/"})),
            (std::vector<std::string>{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}));
  EXPECT_TRUE(cgroup_limit_files({}).empty());
}

TEST(PhysicalMemory, ALimitFileSetsALimitOrNone) {
  EXPECT_EQ(cgroup_limit_from_text("8589934592\n", CgroupVersion::kV2), 8 * kGiB);
  EXPECT_EQ(cgroup_limit_from_text("4294967296\n", CgroupVersion::kV1), 4 * kGiB);
  EXPECT_FALSE(cgroup_limit_from_text("max\n", CgroupVersion::kV2));                   // v2's "no limit"
  EXPECT_FALSE(cgroup_limit_from_text("9223372036854771712\n", CgroupVersion::kV1));  // v1's, 4 KiB pages
  EXPECT_FALSE(cgroup_limit_from_text("9223372036854710272\n", CgroupVersion::kV1));  // v1's, 64 KiB pages
  EXPECT_EQ(cgroup_limit_from_text("4611686018427387903", CgroupVersion::kV1), (std::int64_t{1} << 62) - 1);
  // Malformed or empty: no limit, never a guess.
  for (const char* bad : {"", "\n", "max", "0\n", "-1\n", "12 kB\n", "8G\n", "18446744073709551616\n"}) {
    EXPECT_FALSE(cgroup_limit_from_text(bad, CgroupVersion::kV1)) << bad;
  }
  for (const char* bad : {"", "maximum\n", "0\n", "-1\n", "8G\n", "9223372036854775808\n"}) {
    EXPECT_FALSE(cgroup_limit_from_text(bad, CgroupVersion::kV2)) << bad;
  }
}

TEST(PhysicalMemory, AV2LimitBelowMemTotalBindsAndIsNamed) {
  const MemoryLimit m = memory_limit(files_of({{"/proc/meminfo", kMeminfo64GiB},
                                               {"/proc/self/cgroup", "0::/\n"},
                                               {"/sys/fs/cgroup/memory.max", "8589934592\n"}}),
                                     0);
  EXPECT_EQ(m.bytes, 8 * kGiB);
  EXPECT_EQ(m.source,
            "the cgroup limit in /sys/fs/cgroup/memory.max, below its physical memory 64.00 GiB (MemTotal in "
            "/proc/meminfo)");
}

TEST(PhysicalMemory, MaxOrALimitAboveMemTotalLeavesThePhysicalMemory) {
  for (const char* max : {"max\n", "137438953472\n", "68719476736\n"}) {  // none, 128 GiB, exactly 64 GiB
    const MemoryLimit m = memory_limit(files_of({{"/proc/meminfo", kMeminfo64GiB},
                                                 {"/proc/self/cgroup", "0::/user.slice\n"},
                                                 {"/sys/fs/cgroup/user.slice/memory.max", max}}),
                                       0);
    EXPECT_EQ(m.bytes, 64 * kGiB) << max;
    EXPECT_EQ(m.source, kPhysical64GiB) << max;
  }
}

TEST(PhysicalMemory, TheTightestLimitOfTheCgroupAndItsAncestorsBinds) {
  // A Kubernetes pod's limit on the pod, none on the container; a node-wide reserve above it.
  const std::map<std::string, std::string> pod = {
      {"/proc/meminfo", kMeminfo64GiB},
      {"/proc/self/cgroup", "0::/kubepods/burstable/pod1/ctr\n"},
      {"/sys/fs/cgroup/kubepods/burstable/pod1/ctr/memory.max", "max\n"},
      {"/sys/fs/cgroup/kubepods/burstable/pod1/memory.max", "4294967296\n"},
      {"/sys/fs/cgroup/kubepods/memory.max", "60129542144\n"}};
  MemoryLimit m = memory_limit(files_of(pod), 0);
  EXPECT_EQ(m.bytes, 4 * kGiB);
  EXPECT_NE(m.source.find("the cgroup limit in /sys/fs/cgroup/kubepods/burstable/pod1/memory.max, "), std::string::npos)
      << m.source;
  // The innermost tighter still: it binds.
  std::map<std::string, std::string> tighter = pod;
  tighter["/sys/fs/cgroup/kubepods/burstable/pod1/ctr/memory.max"] = "1073741824\n";
  m = memory_limit(files_of(tighter), 0);
  EXPECT_EQ(m.bytes, 1 * kGiB);
  EXPECT_NE(m.source.find("/sys/fs/cgroup/kubepods/burstable/pod1/ctr/memory.max"), std::string::npos) << m.source;
}

TEST(PhysicalMemory, AContainersOwnMountIsReadAtItsRoot) {
  // Docker without a cgroup namespace: /proc/self/cgroup names the host's path, the mount shows the container's
  // cgroup as its root; the path's own files are not there, the root's is.
  const MemoryLimit m = memory_limit(files_of({{"/proc/meminfo", kMeminfo64GiB},
                                               {"/proc/self/cgroup", "0::/system.slice/docker-abc.scope\n"},
                                               {"/sys/fs/cgroup/memory.max", "2147483648\n"}}),
                                     0);
  EXPECT_EQ(m.bytes, 2 * kGiB);
  EXPECT_NE(m.source.find("/sys/fs/cgroup/memory.max"), std::string::npos) << m.source;
}

TEST(PhysicalMemory, V1LimitsBindAndItsUnlimitedDoesNot) {
  std::map<std::string, std::string> files = {
      {"/proc/meminfo", kMeminfo64GiB},
      {"/proc/self/cgroup", "4:memory:/process_api/abc\n0::/\n"},
      {"/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", "9223372036854771712\n"},
      {"/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes", "9223372036854771712\n"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"}};
  EXPECT_EQ(memory_limit(files_of(files), 0).bytes, 64 * kGiB);
  EXPECT_EQ(memory_limit(files_of(files), 0).source, kPhysical64GiB);
  files["/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes"] = "17179869184\n";
  const MemoryLimit m = memory_limit(files_of(files), 0);
  EXPECT_EQ(m.bytes, 16 * kGiB);
  EXPECT_EQ(m.source,
            "the cgroup limit in /sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes, below its physical "
            "memory 64.00 GiB (MemTotal in /proc/meminfo)");
}

TEST(PhysicalMemory, UnreadableOrMalformedCgroupFilesFallBackToMemTotal) {
  // No /proc/self/cgroup; no limit file; a malformed one.
  for (const std::map<std::string, std::string>& files : std::vector<std::map<std::string, std::string>>{
           {{"/proc/meminfo", kMeminfo64GiB}, {"/sys/fs/cgroup/memory.max", "1073741824\n"}},
           {{"/proc/meminfo", kMeminfo64GiB}, {"/proc/self/cgroup", "0::/a/b\n"}},
           {{"/proc/meminfo", kMeminfo64GiB}, {"/proc/self/cgroup", "0::/\n"}, {"/sys/fs/cgroup/memory.max", "1G\n"}},
       }) {
    const MemoryLimit m = memory_limit(files_of(files), 0);
    EXPECT_EQ(m.bytes, 64 * kGiB);
    EXPECT_EQ(m.source, kPhysical64GiB);
  }
}

TEST(PhysicalMemory, WithoutMemTotalSysconfIsThePhysicalMemory) {
  const std::int64_t sysconf_bytes = 32 * kGiB;
  MemoryLimit m = memory_limit(files_of({{"/proc/meminfo", "MemFree: 5 kB\n"}}), sysconf_bytes);
  EXPECT_EQ(m.bytes, 32 * kGiB);
  EXPECT_EQ(m.source, "its physical memory, sysconf(_SC_PHYS_PAGES) x _SC_PAGE_SIZE");
  m = memory_limit(files_of({{"/proc/self/cgroup", "0::/\n"}, {"/sys/fs/cgroup/memory.max", "8589934592\n"}}),
                   sysconf_bytes);
  EXPECT_EQ(m.bytes, 8 * kGiB);
  EXPECT_EQ(m.source,
            "the cgroup limit in /sys/fs/cgroup/memory.max, below its physical memory 32.00 GiB "
            "(sysconf(_SC_PHYS_PAGES) x _SC_PAGE_SIZE)");
  // No physical figure at all: the cgroup's alone, or nothing (0, unknown: not checked).
  m = memory_limit(files_of({{"/proc/self/cgroup", "0::/\n"}, {"/sys/fs/cgroup/memory.max", "8589934592\n"}}), 0);
  EXPECT_EQ(m.bytes, 8 * kGiB);
  EXPECT_EQ(m.source, "the cgroup limit in /sys/fs/cgroup/memory.max, its physical memory unknown");
  m = memory_limit(files_of({}), 0);
  EXPECT_EQ(m.bytes, 0);
  EXPECT_EQ(m.source, "");
  // v1's "unlimited" is no figure either (not 8 EiB of memory).
  m = memory_limit(files_of({{"/proc/self/cgroup", "4:memory:/\n"},
                             {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"}}),
                   0);
  EXPECT_EQ(m.bytes, 0);
  EXPECT_EQ(m.source, "");
}

}  // namespace
}  // namespace cleave::physical_memory_test
