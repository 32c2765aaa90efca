// Which checkpoint `--resume auto` (and `cleave run`'s restart) continues from when some are damaged: the
// candidates under a checkpoint root in the order they are tried, and the pick once some were found damaged.
//
// Rules (pure functions of the directory listing, the `latest` pointer and the verdicts, unit-tested in
// tests/unit/checkpoint/resume_candidates_test.cpp):
//  - `step_NNNNNNN/` holding index.json is a candidate; `latest` naming one of them makes it the first, and
//    candidates of later steps are left out (they belong to a branch the run left: a resume from an earlier
//    checkpoint); without a usable pointer the newest step comes first; then every earlier step, newest first.
//  - `step_NNNNNNN/` without index.json is damaged (the save protocol renames a directory only after index.json
//    is in it: something removed the marker); `.tmp-step_NNNNNNN/` is an unfinished save (a crash during the
//    save; the next save of that step replaces it) and is never a candidate.
//  - The pick is the first candidate not known damaged; every damaged or unfinished entry of a later step is
//    reported as skipped, newest first. No pick when every candidate is damaged (an error for the caller, never a
//    fresh start over a run's checkpoints), nor when there is none at all (a fresh start).
// Invariant: nothing here touches the file system except scan_resume_candidates, which only lists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cleave::checkpoint {

enum class CandidateState {
  kUnchecked,   // not verified yet
  kIntact,      // verified (loaded)
  kDamaged,     // verification failed: `why`
  kUnfinished,  // a .tmp-step_NNNNNNN left by a crash during a save: not a checkpoint
};

struct ResumeCandidate {
  std::string name;  // "step_0000020" or ".tmp-step_0000021"
  std::int64_t step = 0;
  CandidateState state = CandidateState::kUnchecked;
  std::string why;  // kDamaged, kUnfinished: what is wrong, one line
};

// A directory under the checkpoint root: its name and whether it holds index.json.
struct RootEntry {
  std::string name;
  bool has_index = false;
};

// The candidates and the unfinished saves among `entries`, in the order above (unfinished saves placed by step,
// after a candidate of the same step). `latest` is the pointer file's first line ("" when absent). Entries of
// any other name are ignored.
std::vector<ResumeCandidate> order_resume_candidates(const std::vector<RootEntry>& entries, const std::string& latest);

struct ResumePick {
  std::optional<std::size_t> next;   // index of the candidate to try (or the one loaded)
  std::vector<std::size_t> skipped;  // damaged or unfinished entries before it, in order
};
ResumePick pick_resume(const std::vector<ResumeCandidate>& candidates);

// The listing of `root` (empty when it does not exist) and its `latest` pointer, ordered as above.
std::vector<ResumeCandidate> scan_resume_candidates(const std::string& root);

// The error when `candidates` (under `root`, for `--resume asked`) hold no pick and some are damaged: each damaged
// one with its step and why, and what to do; nothing when they hold a pick, or none is damaged (a fresh start). One text for the
// trainer's NoIntactCheckpoint and for `cleave run`, which stops with it before a restart its quick check already
// shows would fail (engine/supervise/supervisor.cpp).
std::optional<std::string> no_intact_checkpoint_message(const std::string& asked, const std::string& root,
                                                        const std::vector<ResumeCandidate>& candidates);

// "damaged-step_0000020": the name a damaged checkpoint is kept under once a resume fell back past it (never a
// candidate, never pruned, never replaced by a later save of that step); `taken` names already used get ".2", ...
std::string damaged_name(const std::string& name, const std::vector<std::string>& taken);

}  // namespace cleave::checkpoint
