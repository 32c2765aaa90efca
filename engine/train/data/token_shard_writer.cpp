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

void write_llmc_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  CLEAVE_CHECK(!std::filesystem::exists(path), "token shard {}: already exists; not overwriting it", path);
  CLEAVE_CHECK(!tokens.empty(), "token shard {}: no tokens to write (an llm.c shard holds at least one)", path);
  CLEAVE_CHECK(tokens.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
               "token shard {}: {} tokens do not fit the header's int32 count (at most {})", path, tokens.size(),
               std::numeric_limits<std::int32_t>::max());
  std::vector<std::int32_t> header(kLlmcHeaderBytes / 4, 0);
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  CLEAVE_CHECK(file != nullptr, "token shard {}: cannot create {} ({})", path, tmp, std::strerror(errno));
  const bool written = std::fwrite(header.data(), 4, header.size(), file) == header.size() &&
                       std::fwrite(tokens.data(), 2, tokens.size(), file) == tokens.size();
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

}  // namespace cleave::train
