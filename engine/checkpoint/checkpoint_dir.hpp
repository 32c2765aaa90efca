// The on-disk life of a checkpoint directory: `<root>/step_NNNNNNN/` appears whole or not at all.
//
// Protocol (a crash at any moment leaves every earlier checkpoint whole and `latest` naming one of them):
//  1. begin_step_dir: `<root>/.tmp-step_NNNNNNN/` is (re)created empty; writers put their files there and
//     fsync them (write_safetensors and write_file_durable do).
//  2. commit_step_dir: fsync the temporary directory, rename it to `step_NNNNNNN` (replacing an older copy
//     of the same step), fsync `<root>`, then write `<root>/latest` (the directory name, one line) through
//     a temporary file, fsync and rename, and fsync `<root>` again.
//  3. prune_step_dirs: only after 2, remove complete checkpoints beyond the newest keep_last.
// A damaged checkpoint that a resume fell back past is renamed damaged-step_NNNNNNN (set_aside_damaged), which no
// function here lists, prunes or replaces.
// A directory counts as complete when it is named step_NNNNNNN and holds index.json (written last, before
// the rename). Pure file-system code: no ranks (the caller decides which rank runs what).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cleave::checkpoint {

// "step_0000042".
std::string step_dir_name(std::int64_t step);

// Creates `root` when needed and an empty `<root>/.tmp-step_NNNNNNN/` (removing a stale one left by a
// crash); returns its path.
std::string begin_step_dir(const std::string& root, std::int64_t step);

// Steps 2 of the protocol; returns the final directory's path.
std::string commit_step_dir(const std::string& root, std::int64_t step);

// Writes `content` to `path` through `path.tmp` + fsync + rename + fsync of the parent directory.
void write_file_durable(const std::string& path, const std::string& content);

// Complete checkpoint directories under `root`, oldest step first (empty when root does not exist).
std::vector<std::string> complete_step_dirs(const std::string& root);

// Removes complete checkpoints beyond the newest `keep_last` (0 keeps all); returns how many it removed.
int prune_step_dirs(const std::string& root, int keep_last);

// The checkpoint `<root>/latest` names when it is complete, else the newest complete one, else nothing.
std::optional<std::string> latest_step_dir(const std::string& root);

// Points `<root>/latest` at `name` (temp + fsync + rename, as a commit does).
void point_latest(const std::string& root, const std::string& name);

// Renames `<root>/<name>` (a damaged checkpoint a resume fell back past) to `<root>/damaged-<name>` (or
// `.2`, ... when taken; resume_candidates.hpp: damaged_name) and fsyncs `<root>`; returns the new path. Nothing
// is deleted: the files stay as they were found, out of reach of pruning and of a later save of that step.
std::string set_aside_damaged(const std::string& root, const std::string& name);

}  // namespace cleave::checkpoint
