// Output paths checked before work (engine/core/output_path.hpp): a new or existing writable directory passes and
// nothing is created; a file where a directory should be, a directory under a file, an existing output file and
// a read-only directory are errors naming the setting and the path, and bad input (InputError: exit 64, which
// `cleave run` does not restart into); reading_input makes a reader's plain Error bad input and keeps subclasses.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/output_path.hpp"

namespace cleave::output_path_test {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cleave_output_path_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// The error's message, or "" when `f` does not throw.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OutputDir, NewAndExistingDirectoriesPassAndNothingIsCreated) {
  const fs::path root = temp_dir("dirs");
  const std::string fresh = (root / "a" / "b" / "c").string();
  check_output_dir("checkpoint.dir", fresh);
  EXPECT_FALSE(fs::exists(root / "a"));
  check_output_dir("train.out_dir", root.string());
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 0);
  fs::remove_all(root);
}

TEST(OutputDir, AFileIsRefusedNamingTheKeyAndThePath) {
  const fs::path root = temp_dir("file");
  const std::string file = (root / "ck").string();
  std::ofstream(file) << "not a directory";
  const std::string message = error_of([&] { check_output_dir("checkpoint.dir", file); });
  EXPECT_EQ(message, "checkpoint.dir " + file + " exists and is not a directory; nothing was written (choose another "
                     "path or remove it)");
  // A directory under that file: the file on the way is named.
  const std::string under = (fs::path(file) / "step" / "x").string();
  const std::string nested = error_of([&] { check_output_dir("train.out_dir", under); });
  EXPECT_NE(nested.find("train.out_dir " + under + ": " + file + " is a file, not a directory"), std::string::npos)
      << nested;
  EXPECT_NE(error_of([] { check_output_dir("train.out_dir", ""); }).find("train.out_dir is empty"), std::string::npos);
  fs::remove_all(root);
}

TEST(OutputFile, ExistingFilesAndFilesUnderFilesAreRefused) {
  const fs::path root = temp_dir("files");
  const std::string file = (root / "logits.json").string();
  check_output_file("--logits", file);  // new, in a writable directory
  check_output_file("--out", (root / "new" / "dir" / "f.safetensors").string());
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 0);
  std::ofstream(file) << "{}";
  EXPECT_EQ(error_of([&] { check_output_file("--logits", file); }),
            "--logits " + file + " already exists; nothing was written (remove it or choose another path)");
  check_output_file("--logits", file, /*may_exist=*/true);
  const std::string under = (fs::path(file) / "x.json").string();
  EXPECT_NE(error_of([&] { check_output_file("--out", under); }).find(file + " is a file, not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file("--out", root.string(), true); }).find("is not a regular file"),
            std::string::npos);
  fs::remove_all(root);
}

// An output that exists, or a file where a directory must be, is the command line's fault: InputError (exit 64;
// they were plain Errors, exit 1, so `cleave run` and scripts took them for a failure of the work).
TEST(OutputPath, RefusalsAreBadInput) {
  const fs::path root = temp_dir("input");
  const std::string file = (root / "best.json").string();
  std::ofstream(file) << "{}";
  EXPECT_THROW(check_output_file("plan: --write", file), InputError);
  EXPECT_THROW(check_output_dir("bench: --out", file), InputError);
  EXPECT_THROW(check_output_file("--out", (fs::path(file) / "x").string()), InputError);
  fs::remove_all(root);
}

class Damage : public Error {
 public:
  using Error::Error;
};

TEST(ReadingInput, APlainErrorBecomesBadInputAndSubclassesKeepTheirType) {
  EXPECT_EQ(reading_input([] { return 7; }), 7);
  EXPECT_THROW(reading_input([]() -> int { throw Error("hf: tensor missing"); }), InputError);
  try {
    reading_input([] { throw Error("hf: tensor missing"); });
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "hf: tensor missing");
  }
  EXPECT_THROW(reading_input([] { throw Damage("bytes differ"); }), Damage);
  try {
    reading_input([] { throw Damage("bytes differ"); });
  } catch (const InputError&) {
    ADD_FAILURE() << "a subclass became InputError";
  } catch (const Damage&) {
  }
}

// Permissions bind only a non-root user (root writes anywhere except a read-only file system).
TEST(OutputDir, AReadOnlyDirectoryIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not apply";
  const fs::path root = temp_dir("readonly");
  ASSERT_EQ(::chmod(root.c_str(), 0555), 0);
  const std::string message = error_of([&] { check_output_dir("checkpoint.dir", (root / "ck").string()); });
  EXPECT_NE(message.find("cannot create files in " + root.string()), std::string::npos) << message;
  ::chmod(root.c_str(), 0755);
  fs::remove_all(root);
}

// /proc/self takes no new entries, root's included (the kernel's access check says so): refused as root too.
TEST(OutputDir, AnUnwritableFileSystemIsRefused) {
  if (!fs::is_directory("/proc/self") || ::access("/proc/self", W_OK) == 0) GTEST_SKIP() << "no read-only /proc/self";
  const std::string message = error_of([] { check_output_dir("train.out_dir", "/proc/self/cleave_run"); });
  EXPECT_NE(message.find("train.out_dir /proc/self/cleave_run: cannot create files in /proc/self"), std::string::npos)
      << message;
}

// A kernel file system takes no outputs, and root's access(2) says it does: `cleave bench --out /proc/x` as root ran
// the whole benchmark and then failed to create the directory. Refused at the check, root or not.
TEST(OutputDir, AKernelFileSystemIsRefusedEvenForRoot) {
  if (!fs::is_directory("/proc/self")) GTEST_SKIP() << "no /proc";
  const std::string dir = error_of([] { check_output_dir("--out", "/proc/cleave_bench_out"); });
  EXPECT_NE(dir.find("--out /proc/cleave_bench_out: cannot create files in /proc"), std::string::npos) << dir;
  const std::string file = error_of([] { check_output_file("--json", "/proc/cleave_plan.json"); });
  EXPECT_NE(file.find("--json /proc/cleave_plan.json: cannot create files in /proc"), std::string::npos) << file;
  EXPECT_FALSE(fs::exists("/proc/cleave_bench_out"));
  if (fs::is_directory("/sys/kernel")) {
    const std::string sys = error_of([] { check_output_dir("train.out_dir", "/sys/kernel/cleave_run/sub"); });
    EXPECT_NE(sys.find("train.out_dir /sys/kernel/cleave_run/sub: cannot create files in /sys/kernel"),
              std::string::npos) << sys;
  }
}

}  // namespace
}  // namespace cleave::output_path_test
