// RangeFile (range_file.hpp).
#include "engine/checkpoint/range_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/core/error.hpp"

namespace cleave::checkpoint {

RangeFile::RangeFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  CLEAVE_CHECK(fd_ >= 0, "checkpoint file {}: cannot open ({})", path_, std::strerror(errno));
}

RangeFile::RangeFile(RangeFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), bytes_read_(other.bytes_read_) {}

RangeFile::~RangeFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RangeFile::read(std::int64_t offset, std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const auto at = static_cast<off_t>(offset + static_cast<std::int64_t>(done));
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, at);
    if (n < 0 && errno == EINTR) continue;
    CLEAVE_CHECK(n > 0,
                 "checkpoint file {}: reading {} bytes at offset {} failed after {} ({}; truncated or replaced?)", path_, out.size(), offset, done, n < 0 ? std::strerror(errno) : "end of file");
    done += static_cast<std::size_t>(n);
  }
  bytes_read_ += static_cast<std::int64_t>(out.size());
}

}  // namespace cleave::checkpoint
