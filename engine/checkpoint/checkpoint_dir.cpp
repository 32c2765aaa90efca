// Atomic checkpoint directories (checkpoint_dir.hpp).
#include "engine/checkpoint/checkpoint_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "engine/checkpoint/resume_candidates.hpp"
#include "engine/core/error.hpp"

namespace cleave::checkpoint {
namespace {

namespace fs = std::filesystem;

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  CLEAVE_CHECK(fd >= 0, "checkpoint: cannot open {} to fsync it ({})", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  CLEAVE_CHECK(rc == 0, "checkpoint: fsync of {} failed ({})", path, std::strerror(err));
}

bool is_step_name(const std::string& name) {
  return name.size() == 12 && name.starts_with("step_") &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string step_dir_name(std::int64_t step) { return fmt::format("step_{:07d}", step); }

std::string begin_step_dir(const std::string& root, std::int64_t step) {
  std::error_code ec;
  fs::create_directories(root, ec);
  CLEAVE_CHECK(!ec, "checkpoint.dir {}: cannot create the directory ({})", root, ec.message());
  const std::string tmp = (fs::path(root) / (".tmp-" + step_dir_name(step))).string();
  fs::remove_all(tmp, ec);
  CLEAVE_CHECK(!ec, "checkpoint: cannot remove the stale temporary directory {} ({})", tmp, ec.message());
  fs::create_directory(tmp, ec);
  CLEAVE_CHECK(!ec, "checkpoint: cannot create {} ({})", tmp, ec.message());
  return tmp;
}

void write_file_durable(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CLEAVE_CHECK(fd >= 0, "checkpoint: cannot create {} ({})", tmp, std::strerror(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t w = ::write(fd, content.data() + done, content.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      CLEAVE_THROW("checkpoint: write to {} failed ({})", tmp, std::strerror(err));
    }
    done += static_cast<std::size_t>(w);
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  CLEAVE_CHECK(rc == 0, "checkpoint: fsync of {} failed", tmp);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  CLEAVE_CHECK(!ec, "checkpoint: cannot rename {} to {} ({})", tmp, path, ec.message());
  const fs::path parent = fs::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string(), true);
}

std::string commit_step_dir(const std::string& root, std::int64_t step) {
  const std::string name = step_dir_name(step);
  const std::string tmp = (fs::path(root) / (".tmp-" + name)).string();
  const std::string final_dir = (fs::path(root) / name).string();
  CLEAVE_CHECK(fs::exists(fs::path(tmp) / "index.json"),
               "checkpoint: {} has no index.json; refusing to commit an incomplete checkpoint", tmp);
  fsync_path(tmp, true);
  std::error_code ec;
  if (fs::exists(final_dir)) {  // the same step saved again (a resumed run): the new copy replaces it
    const std::string old = (fs::path(root) / (".old-" + name)).string();
    fs::remove_all(old, ec);
    fs::rename(final_dir, old, ec);
    CLEAVE_CHECK(!ec, "checkpoint: cannot move the older {} aside ({})", final_dir, ec.message());
    fs::rename(tmp, final_dir, ec);
    CLEAVE_CHECK(!ec, "checkpoint: cannot rename {} to {} ({})", tmp, final_dir, ec.message());
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_dir, ec);
    CLEAVE_CHECK(!ec, "checkpoint: cannot rename {} to {} ({})", tmp, final_dir, ec.message());
  }
  fsync_path(root, true);
  point_latest(root, name);
  return final_dir;
}

void point_latest(const std::string& root, const std::string& name) {
  write_file_durable((fs::path(root) / "latest").string(), name + "\n");
}

std::string set_aside_damaged(const std::string& root, const std::string& name) {
  std::vector<std::string> taken;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) taken.push_back(entry.path().filename().string());
  const fs::path to = fs::path(root) / damaged_name(name, taken);
  fs::rename(fs::path(root) / name, to, ec);
  CLEAVE_CHECK(!ec, "checkpoint: cannot rename the damaged {} to {} to keep it ({}); nothing was started",
               (fs::path(root) / name).string(), to.string(), ec.message());
  fsync_path(root, true);
  return to.string();
}

std::vector<std::string> complete_step_dirs(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && is_step_name(name) && fs::exists(entry.path() / "index.json")) {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());  // fixed-width step numbers sort by step
  return out;
}

int prune_step_dirs(const std::string& root, int keep_last) {
  if (keep_last <= 0) return 0;
  const auto dirs = complete_step_dirs(root);
  int removed = 0;
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < dirs.size(); ++i) {
    std::error_code ec;
    fs::remove_all(dirs[i], ec);
    CLEAVE_CHECK(!ec, "checkpoint: cannot prune {} ({})", dirs[i], ec.message());
    ++removed;
  }
  return removed;
}

std::optional<std::string> latest_step_dir(const std::string& root) {
  std::ifstream pointer(fs::path(root) / "latest");
  std::string name;
  if (pointer && std::getline(pointer, name) && is_step_name(name) &&
      fs::exists(fs::path(root) / name / "index.json")) {
    return (fs::path(root) / name).string();
  }
  const auto dirs = complete_step_dirs(root);
  if (dirs.empty()) return std::nullopt;
  return dirs.back();
}

}  // namespace cleave::checkpoint
