// llm.c shard writer (see token_shard_writer.hpp). The host is little-endian (as token_file.cpp assumes).
#include "engine/train/data/token_shard_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "engine/core/error.hpp"
#include "engine/train/data/token_file.hpp"

namespace cleave::train {

namespace {

void write_shard(const std::string& path, const void* tokens, std::size_t count, int width) {
  CLEAVE_CHECK(!std::filesystem::exists(path), "token shard {}: already exists; not overwriting it", path);
  CLEAVE_CHECK(count > 0, "token shard {}: no tokens to write (an llm.c shard holds at least one)", path);
  CLEAVE_CHECK(count <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
               "token shard {}: {} tokens do not fit the header's int32 count (at most {})", path, count,
               std::numeric_limits<std::int32_t>::max());
  std::vector<std::int32_t> header(kLlmcHeaderBytes / 4, 0);
  header[0] = width == 2 ? kLlmcMagic : kLlmcMagic32;
  header[1] = width == 2 ? kLlmcVersion : kLlmcVersion32;
  header[2] = static_cast<std::int32_t>(count);
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  CLEAVE_CHECK(file != nullptr, "token shard {}: cannot create {} ({})", path, tmp, std::strerror(errno));
  const bool written = std::fwrite(header.data(), 4, header.size(), file) == header.size() &&
                       std::fwrite(tokens, static_cast<std::size_t>(width), count, file) == count;
  const int write_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    CLEAVE_THROW("token shard {}: writing {} failed ({})", path, tmp, std::strerror(written ? errno : write_errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    CLEAVE_THROW("token shard {}: cannot rename {} to it ({})", path, tmp, ec.message());
  }
}

}  // namespace

void write_llmc_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  write_shard(path, tokens.data(), tokens.size(), 2);
}

void write_llmc_shard(const std::string& path, std::span<const std::int32_t> ids, int bits) {
  CLEAVE_ASSERT(bits == 16 || bits == 32, "write_llmc_shard: bits {}", bits);
  if (bits == 32) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      CLEAVE_CHECK(ids[i] >= 0, "token shard {}: id {} at position {} is negative", path, ids[i], i);
    }
    write_shard(path, ids.data(), ids.size(), 4);  // int32 ≥ 0 has uint32's bytes
    return;
  }
  std::vector<std::uint16_t> narrow(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CLEAVE_CHECK(ids[i] >= 0 && ids[i] <= 65535, "token shard {}: id {} at position {} does not fit a 16-bit shard "
                 "(use 32 bits)", path, ids[i], i);
    narrow[i] = static_cast<std::uint16_t>(ids[i]);
  }
  write_shard(path, narrow.data(), narrow.size(), 2);
}

}  // namespace cleave::train
