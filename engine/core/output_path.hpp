// Output paths checked before work: a command that will write a directory or a file checks, before its first
// step or its first byte, that it can, so a bad path fails in the first second, naming the key or option and
// the path, and never after the work it was meant to keep (a checkpoint.dir that is a file used to be found at
// the first save).
//
// Invariant: the check_* functions create, write and remove nothing (create_parent_dirs, for the writer that
// follows a passed check, creates the directories the check allowed). A path that does not exist yet passes when its
// nearest existing ancestor is a directory this process may create entries in (access(2) W_OK | X_OK, which
// also reports a read-only file system) and is no kernel file system (proc, sysfs, cgroup...: root's access(2)
// passes them, yet they take no outputs); anything else throws cleave::InputError "<what> <path>: <why>" (bad input:
// `cleave` exits ExitCode::kBadInput, 64, and `cleave run` does not restart into it); create_parent_dirs, at write
// time, throws a plain Error.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cleave {

// `path` will be a directory the caller writes into: it is a writable directory, or can be created. `what`
// names the setting: "train.out_dir", "checkpoint.dir", "--out".
void check_output_dir(std::string_view what, const std::string& path);

// `path` will be a new file: it does not exist (unless `may_exist`; then, if it does, it is a regular file that
// can be written), and its directory is writable or can be created.
void check_output_file(std::string_view what, const std::string& path, bool may_exist = false);

// A command that writes several files: no two of `outputs` (option name, path; empty paths skipped) name the same
// file (after making them absolute and normal: "a.json" and "./a.json" are one), so that neither silently
// replaces the other. Throws cleave::InputError "<command>: <option> and <option> both name <path>: ...".
void check_distinct_outputs(std::string_view command,
                            const std::vector<std::pair<std::string_view, std::string>>& outputs);

// Creates the missing directories above the file `path` (the ones check_output_file found creatable), so
// an ofstream opened next does not fail on a path the check passed. Throws cleave::Error naming `what`.
void create_parent_dirs(std::string_view what, const std::string& path);

}  // namespace cleave
