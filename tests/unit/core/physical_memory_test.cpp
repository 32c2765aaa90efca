// mem_total_from_meminfo (engine/core/physical_memory.hpp): /proc/meminfo's MemTotal line in bytes, from recorded
// texts; a missing or malformed line is no figure (nullopt), never a guess.
#include <gtest/gtest.h>

#include "engine/core/physical_memory.hpp"

namespace cleave {
namespace {

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

}  // namespace
}  // namespace cleave
