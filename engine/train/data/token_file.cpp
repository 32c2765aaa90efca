// Opening and checking token files (see token_file.hpp). POSIX mmap keeps large shards out of the heap.
#include "engine/train/data/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"

namespace cleave::train {

std::string_view token_format_name(TokenFormat format) {
  switch (format) {
    case TokenFormat::kText: return "text file";
    case TokenFormat::kLlmc: return "llm.c token shard";
    case TokenFormat::kUint16: return "uint16 token file";
  }
  return "?";
}

TokenRange locate_tokens(std::span<const std::uint8_t> bytes, TokenFormat format, std::string_view what) {
  const auto file_bytes = static_cast<std::int64_t>(bytes.size());
  CLEAVE_CHECK_INPUT(file_bytes > 0, "{}: the file is empty (0 bytes)", what);
  switch (format) {
    case TokenFormat::kText: return {0, file_bytes, 1};
    case TokenFormat::kUint16:
      CLEAVE_CHECK_INPUT(file_bytes % 2 == 0,
                   "{}: {} bytes is not a whole number of uint16 tokens (odd size: truncated or not uint16 tokens)",
                   what, file_bytes);
      return {0, file_bytes / 2, 2};
    case TokenFormat::kLlmc: {
      CLEAVE_CHECK_INPUT(file_bytes >= kLlmcHeaderBytes,
                   "{}: {} bytes is shorter than the {}-byte llm.c header (truncated; for headerless tokens set "
                   "data.format=uint16)",
                   what, file_bytes, kLlmcHeaderBytes);
      std::int32_t header[3];
      std::memcpy(header, bytes.data(), sizeof header);
      CLEAVE_CHECK_INPUT(header[0] == kLlmcMagic || header[0] == kLlmcMagic32,
                   "{}: wrong magic number {} (expected {} for uint16 ids or {} for uint32 ids): not an llm.c token "
                   "shard (for headerless uint16 tokens set data.format=uint16)",
                   what, header[0], kLlmcMagic, kLlmcMagic32);
      const bool wide = header[0] == kLlmcMagic32;
      const std::int32_t version = wide ? kLlmcVersion32 : kLlmcVersion;
      CLEAVE_CHECK_INPUT(header[1] == version, "{}: llm.c shard version {}, expected {} (magic {}: {} tokens)", what,
                   header[1], version, header[0], wide ? "uint32" : "uint16");
      CLEAVE_CHECK_INPUT(header[2] > 0, "{}: the header says {} tokens (empty shard)", what, header[2]);
      // header[2] is at most 2^31 - 1, so the expected size cannot overflow.
      const int width = wide ? 4 : 2;
      const std::int64_t expected = kLlmcHeaderBytes + width * static_cast<std::int64_t>(header[2]);
      CLEAVE_CHECK_INPUT(file_bytes == expected,
                   "{}: the header says {} tokens ({} + {} × {} = {} bytes) but the file has {} bytes ({})", what,
                   header[2], kLlmcHeaderBytes, width, header[2], expected, file_bytes,
                   file_bytes < expected ? "truncated" : fmt::format("{} extra bytes", file_bytes - expected));
      return {kLlmcHeaderBytes, header[2], width};
    }
  }
  CLEAVE_ASSERT(false, "locate_tokens: unknown TokenFormat {}", static_cast<int>(format));
  return {};
}

TokenFile::TokenFile(std::string path, TokenFormat format) : path_(std::move(path)), format_(format) {
  const std::string what = fmt::format("data file {}", path_);
  std::error_code ec;
  CLEAVE_CHECK_INPUT(std::filesystem::exists(path_, ec), "{}: no such file", what);
  CLEAVE_CHECK_INPUT(std::filesystem::is_regular_file(path_, ec), "{}: not a regular file", what);
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  CLEAVE_CHECK(fd >= 0, "{}: cannot open ({})", what, std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    CLEAVE_THROW("{}: cannot stat ({})", what, std::strerror(err));
  }
  const auto file_bytes = static_cast<std::int64_t>(info.st_size);
  if (file_bytes == 0) {
    ::close(fd);
    throw InputError(fmt::format("{}: the file is empty (0 bytes)", what));
  }
  map_bytes_ = static_cast<std::size_t>(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    CLEAVE_THROW("{}: cannot map {} bytes ({})", what, file_bytes, std::strerror(map_errno));
  }
  const auto* base = static_cast<const std::uint8_t*>(map_);
  try {
    const TokenRange range = locate_tokens(std::span(base, map_bytes_), format_, what);
    width_ = range.width;
    if (width_ == 1) bytes_ = base;
    else if (width_ == 2) tokens_ = reinterpret_cast<const std::uint16_t*>(base + range.offset);
    else tokens32_ = reinterpret_cast<const std::uint32_t*>(base + range.offset);
    count_ = range.count;
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

std::pair<std::int32_t, std::int64_t> TokenFile::max_token(std::int64_t begin, std::int64_t end) const {
  CLEAVE_ASSERT(0 <= begin && begin <= end && end <= count_, "max_token [{}, {}) of {}", begin, end, count_);
  std::int64_t best = -1;  // 32-bit ids are compared unsigned: one ≥ 2^31 is reported as 2^31 - 1 at least
  std::int64_t where = begin;
  for (std::int64_t i = begin; i < end; ++i) {
    const std::int64_t t = width_ == 4 ? static_cast<std::int64_t>(tokens32_[i]) : at(i);
    if (t > best) best = t, where = i;
  }
  return {static_cast<std::int32_t>(std::min<std::int64_t>(best, std::numeric_limits<std::int32_t>::max())), where};
}

}  // namespace cleave::train
