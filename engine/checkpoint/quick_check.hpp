// The cheap look at a checkpoint directory that `cleave run` takes to name the checkpoint a restart continues
// from: index.json read and checked (its own checksum included: checkpoint_index.hpp), every file it lists present
// with the recorded size and, where the index records one, a header that matches its checksum. Reads index.json
// and the files' headers only (kilobytes), never tensor data: a flipped bit inside a tensor's bytes is found by the
// load, which verifies every chunk it reads (engine/train/checkpoint/checkpoint_reader.hpp), not here.
#pragma once

#include <optional>
#include <string>

#include <vector>

#include "engine/checkpoint/checkpoint_index.hpp"
#include "engine/checkpoint/resume_candidates.hpp"

namespace cleave::checkpoint {

// Every file `index` lists: present in `step_dir`, of the recorded size, and, where the index records a header
// checksum, a header that matches it (read, checked, closed: no file stays open). Throws CheckpointDamage naming
// the file.
void check_checkpoint_files(const std::string& step_dir, const CheckpointIndex& index);

// What is wrong with `step_dir` (one line naming the file), or nothing.
std::optional<std::string> quick_check(const std::string& step_dir);

// The candidates under `root` (resume_candidates.hpp's order) checked in turn until one passes quick_check: that one
// kIntact, those before it kDamaged with quick_check's line as `why`, the rest as listed. Reads only.
std::vector<ResumeCandidate> quick_check_candidates(const std::string& root);
// The checkpoint `--resume auto` would try first under `root` among those quick_check passes (the kIntact one of
// quick_check_candidates); nothing when none does. Reads only.
std::optional<std::string> newest_passing_quick_check(const std::string& root);

}  // namespace cleave::checkpoint
