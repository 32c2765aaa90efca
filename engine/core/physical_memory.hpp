// The machine's physical memory, as the OS reports it: MemTotal of /proc/meminfo, else sysconf's page count x page
// size. What a host can hold is checked against it before a run builds anything (run_plan/host_fit.hpp).
//
// Invariant: physical_memory() is the only function here that looks at the machine; mem_total_from_meminfo is pure,
// so tests feed it recorded texts. A figure the OS does not give is 0 bytes ("unknown"), never a guess.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cleave {

struct PhysicalMemory {
  std::int64_t bytes = 0;  // 0: unknown
  std::string source;      // "MemTotal in /proc/meminfo", "sysconf(_SC_PHYS_PAGES)"
};

// The "MemTotal:  <n> kB" line of /proc/meminfo's text, in bytes; nullopt when the line is missing or malformed.
std::optional<std::int64_t> mem_total_from_meminfo(std::string_view meminfo_text);

// This machine's physical memory (see above).
PhysicalMemory physical_memory();

}  // namespace cleave
