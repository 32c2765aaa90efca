// Resuming a run (train --resume) and restarting one (cleave run): the resumed config held against the
// checkpoint's (which checkpoint --resume loads: resume_fallback.hpp), config.json's previous text kept, run.json's
// resume history, and the restart record `cleave run` hands a restarted job.
//
// Invariants: a resumed config that changes a key needing --allow-config-change is refused on every rank alike
// (the check's error is shared over the world); a kept config file is never overwritten (a second copy gets a
// numbered name); run.json's history keeps only the resumes before this one's step, so a run resumed twice from
// the same checkpoint records that resume once; a fresh start under --resume auto (no checkpoint yet) replaces no
// earlier attempt's run files: they are moved aside first (keep_earlier_attempt).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/report/run_summary.hpp"
#include "engine/train/checkpoint/config_change.hpp"
#include "engine/train/rank_setup.hpp"

namespace cleave::train {

// A resumed run's config against the one its checkpoint was trained with (index.json "config"; a checkpoint
// written before that field existed is compared with the run directory's config.json, when there is one).
// Refused on every rank when a key changed that `allowed` does not cover (config_change.hpp). Collective.
std::vector<ConfigChange> check_resumed_config(RankSetup& setup, const std::string& step_dir,
                                               const std::vector<std::string>& allowed);

// config.json of a resumed run is replaced only when it says something new, and then the old one is kept as
// config.before_step_<step>.json.
void keep_previous_config(const std::string& out_dir, const std::string& new_text, std::int64_t step);

// The run files an earlier attempt left in `out_dir` (config.json, config.before_step_*.json, metrics.jsonl, run.json,
// report.html, trace.json), moved into a new `out_dir`/earlier_attempt_N/ (N the smallest free, from 1) before a fresh
// start under --resume auto writes its own: an attempt that ended (or died) before its first checkpoint loses
// nothing, and the kept directory is itself a run directory (`cleave report` reads it). Returns that directory; ""
// (nothing moved, nothing created) when `out_dir` holds none of them or does not exist.
std::string keep_earlier_attempt(const std::string& out_dir);

// run.json of a resumed run: the resumes recorded earlier in `out_dir` (before `step`) and this one, from
// `step_dir` with `changes`. A fresh run's record (`resumed` false) is returned as it is.
report::RunSummary with_resume(report::RunSummary record, const std::string& out_dir, bool resumed,
                               std::int64_t step, const std::string& step_dir,
                               const std::vector<ConfigChange>& changes);

// TrainOptions::restart_record, read on world rank 0 (the only rank that writes metrics); number 0 = none.
struct RestartRecord {
  std::int64_t number = 0;
  double launched_unix_s = 0;
};
// An empty `path` or `reads` false: none. A file that cannot be read is a warning, and none.
RestartRecord read_restart_record(const std::string& path, bool reads);

}  // namespace cleave::train
