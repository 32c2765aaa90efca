// FNV-1a 64 (checksum.hpp).
#include "engine/checkpoint/checksum.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace cleave::checkpoint {

std::uint64_t fnv1a64_update(std::uint64_t hash, std::span<const std::byte> bytes) {
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  for (std::byte b : bytes) {
    hash ^= static_cast<std::uint64_t>(b);
    hash *= kPrime;
  }
  return hash;
}

std::uint64_t file_checksum(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  CLEAVE_CHECK(f != nullptr, "checkpoint file {}: cannot open for reading ({})", path, std::strerror(errno));
  std::vector<std::byte> buffer(1 << 20);
  std::uint64_t hash = kFnv1a64Offset;
  for (;;) {
    const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), f);
    hash = fnv1a64_update(hash, std::span(buffer.data(), n));
    if (n < buffer.size()) break;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  CLEAVE_CHECK(!failed, "checkpoint file {}: read error while computing its checksum", path);
  return hash;
}

std::string checksum_text(std::uint64_t hash) { return fmt::format("fnv1a64:{:016x}", hash); }

}  // namespace cleave::checkpoint
