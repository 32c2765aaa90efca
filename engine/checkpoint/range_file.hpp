// RangeFile: one checkpoint file opened read-only for reads of byte ranges (pread), counting the bytes it read.
//
// Invariant: every read returns exactly the bytes asked for or throws Error naming the file, the offset and the
// length (a short read means the file changed under us: truncated or replaced). Owns its descriptor (closed in
// the destructor); movable, not copyable. Not thread-safe: one reader at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cleave::checkpoint {

class RangeFile {
 public:
  // Opens `path`; throws Error naming it when it cannot.
  explicit RangeFile(std::string path);
  RangeFile(RangeFile&& other) noexcept;
  RangeFile& operator=(RangeFile&&) = delete;
  RangeFile(const RangeFile&) = delete;
  RangeFile& operator=(const RangeFile&) = delete;
  ~RangeFile();

  // Reads out.size() bytes at `offset`.
  void read(std::int64_t offset, std::span<std::byte> out);
  const std::string& path() const { return path_; }
  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t bytes_read_ = 0;
};

}  // namespace cleave::checkpoint
