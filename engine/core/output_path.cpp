// Output path checks (output_path.hpp).
#include "engine/core/output_path.hpp"

#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"

namespace cleave {
namespace fs = std::filesystem;

namespace {

// The kernel's own file systems, which hold no files of ours: root's access(2) passes them (root may write anything
// but a read-only mount), yet creating an output there fails (mkdir /proc/x: ENOENT; a file in a cgroup: EACCES),
// after the work. Magic numbers from linux/magic.h; the name for the message, nullptr for any other file system.
const char* kernel_file_system(const fs::path& dir) {
  struct statfs info {};
  if (::statfs(dir.c_str(), &info) != 0) return nullptr;
  switch (static_cast<unsigned long>(info.f_type)) {
    case 0x9fa0UL: return "proc";
    case 0x62656572UL: return "sysfs";
    case 0x27e0ebUL: return "cgroup";
    case 0x63677270UL: return "cgroup2";
    case 0x64626720UL: return "debugfs";
    case 0x74726163UL: return "tracefs";
    case 0x73636673UL: return "securityfs";
    case 0x1cd1UL: return "devpts";
    default: return nullptr;
  }
}

// The nearest existing ancestor of `path` (path itself when it exists) must be a directory that entries can be
// created in; a file on the way is named.
void check_creatable(std::string_view what, const std::string& path, const fs::path& start) {
  std::error_code ec;
  fs::path existing = start;
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (existing.empty()) existing = fs::current_path(ec);
  CLEAVE_CHECK_INPUT(fs::is_directory(existing, ec),
               "{} {}: {} is a file, not a directory, so nothing can be created under it; choose another path", what,
               path, existing.string());
  CLEAVE_CHECK_INPUT(::access(existing.c_str(), W_OK | X_OK) == 0,
               "{} {}: cannot create files in {} ({}); choose a writable path", what, path, existing.string(),
               std::strerror(errno));
  const char* kernel = kernel_file_system(existing);
  CLEAVE_CHECK_INPUT(kernel == nullptr,
                     "{} {}: cannot create files in {} (the kernel's {} file system holds no outputs); choose a "
                     "writable path", what, path, existing.string(), kernel ? kernel : "");
}

}  // namespace

void check_output_dir(std::string_view what, const std::string& path) {
  CLEAVE_CHECK_INPUT(!path.empty(), "{} is empty; give a directory to write into", what);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    CLEAVE_CHECK_INPUT(fs::is_directory(path, ec),
                 "{} {} exists and is not a directory; nothing was written (choose another path or remove it)", what,
                 path);
  }
  check_creatable(what, path, fs::path(path));
}

void check_output_file(std::string_view what, const std::string& path, bool may_exist) {
  CLEAVE_CHECK_INPUT(!path.empty(), "{} is empty; give a file to write", what);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    CLEAVE_CHECK_INPUT(may_exist, "{} {} already exists; nothing was written (remove it or choose another path)", what,
                 path);
    CLEAVE_CHECK_INPUT(fs::is_regular_file(path, ec), "{} {} exists and is not a regular file; choose another path", what,
                 path);
    CLEAVE_CHECK_INPUT(::access(path.c_str(), W_OK) == 0, "{} {}: cannot write it ({})", what, path, std::strerror(errno));
    return;
  }
  const fs::path parent = fs::path(path).parent_path();
  check_creatable(what, path, parent.empty() ? fs::path(".") : parent);
}

void check_distinct_outputs(std::string_view command,
                            const std::vector<std::pair<std::string_view, std::string>>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      const auto& [a, a_path] = outputs[i];
      const auto& [b, b_path] = outputs[j];
      if (a_path.empty() || b_path.empty()) continue;
      std::error_code ec;
      const fs::path a_full = fs::absolute(a_path, ec).lexically_normal(), b_full = fs::absolute(b_path, ec).lexically_normal();
      CLEAVE_CHECK_INPUT(a_full != b_full,
                         "{}: {} and {} both name {}: one would replace the other; nothing was written (give each its "
                         "own file)", command, a, b, b_path);
    }
  }
}

void create_parent_dirs(std::string_view what, const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  CLEAVE_CHECK(!ec, "{} {}: cannot create its directory {} ({})", what, path, parent.string(), ec.message());
}

}  // namespace cleave
