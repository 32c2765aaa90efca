// Token files, memory-mapped read-only: byte-level text, llm.c shards and headerless uint16 tokens.
//
// Invariant: a TokenFile that was constructed is valid: every check (exists, non-empty, header magic,
// version and token count against the file size, even size for uint16) has passed, and every error is one
// line naming the file and the numbers. Tokens are read little-endian.
//
// llm.c shard layouts (dev/data/data_common.py HEADERS_INFO): 256 × int32 header {magic, version, token
// count, 0...}, then the tokens: {20240520, 1} GPT-2 style, uint16 ids; {20240801, 7} Llama 3 style, uint32 ids
// (any vocabulary size). data.format "llmc" reads both; the header says which.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace cleave::train {

enum class TokenFormat { kText, kLlmc, kUint16 };
std::string_view token_format_name(TokenFormat format);  // "text file", "llm.c token shard", "uint16 token file"

inline constexpr std::int32_t kLlmcMagic = 20240520;  // uint16 ids
inline constexpr std::int32_t kLlmcVersion = 1;
inline constexpr std::int32_t kLlmcMagic32 = 20240801;  // uint32 ids
inline constexpr std::int32_t kLlmcVersion32 = 7;
inline constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

// Where the tokens of a file's bytes are: `count` tokens of `width` bytes starting `offset` bytes in (1 byte
// each for text, 2 for uint16 and 16-bit llmc, 4 for 32-bit llmc). Every header field is checked against the file size before it is used, so the range
// always lies inside `bytes`. Pure (no I/O): TokenFile calls it on the mapped file, the fuzz target on its
// input. Throws Error naming `what` (e.g. "data file x.bin") and the numbers.
struct TokenRange {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  int width = 1;
};
TokenRange locate_tokens(std::span<const std::uint8_t> bytes, TokenFormat format, std::string_view what);

class TokenFile {
 public:
  TokenFile(std::string path, TokenFormat format);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  TokenFormat format() const { return format_; }
  std::int64_t size() const { return count_; }  // tokens
  int bits() const { return 8 * width_; }  // 8 text, 16, or 32
  std::int32_t at(std::int64_t i) const {
    switch (width_) {
      case 1: return static_cast<std::int32_t>(bytes_[i]);
      case 2: return static_cast<std::int32_t>(tokens_[i]);
      default: return static_cast<std::int32_t>(tokens32_[i]);  // ids < 2^31: checked against vocab_size
    }
  }
  // Largest token id in [begin, end) and its position (for the vocab-size check).
  std::pair<std::int32_t, std::int64_t> max_token(std::int64_t begin, std::int64_t end) const;

 private:
  std::string path_;
  TokenFormat format_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const std::uint8_t* bytes_ = nullptr;    // text
  const std::uint16_t* tokens_ = nullptr;  // 16-bit llmc, uint16
  const std::uint32_t* tokens32_ = nullptr;  // 32-bit llmc
  int width_ = 1;
  std::int64_t count_ = 0;
};

}  // namespace cleave::train
