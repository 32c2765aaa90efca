// `train --resume` carried out: the checkpoint it names checked against the config and loaded. For `auto` (and a
// checkpoint root) the newest intact checkpoint is taken: one that turns out damaged (CheckpointDamage: a file
// missing, cut short or failing its checksum, index.json failing its own) is skipped, the next older one tried,
// and once one has loaded every skipped damaged checkpoint is renamed damaged-step_NNNNNNN (kept as evidence,
// out of reach of pruning and of the resumed run's own save of that step) and `latest` names the one loaded.
// Each skip is one log line (which and why). Which one to try next is engine/checkpoint/resume_candidates.hpp's.
//
// Invariants: collective, every rank takes the same path (damage found by one rank is shared: checkpoint_pieces.hpp);
// only CheckpointDamage falls back: any other refusal (another model, a config change, a checkpoint beyond
// train.steps) stops as before; nothing is renamed or written unless a checkpoint loaded; every damaged one and
// no intact one is one Error listing each and why, with nothing loaded, renamed or written. Verification costs no
// extra read: each rank verifies the chunks it loads (and every file's header before that), and the ranks together
// load every byte of a checkpoint's parameters and optimizer state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/train/checkpoint/config_change.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/step_tail.hpp"

namespace cleave::train {

// The parts of a run a resume loads into (the Trainer's: trainer_impl.hpp), by reference; the checkpoint code
// takes them as arguments and never the Trainer.
struct RunParts {
  RankSetup& setup;
  RankModel& model;
  StepTail& tail;
};

// The --resume keyword (the other values are paths): the newest intact checkpoint under the run's root.
inline constexpr std::string_view kResumeAuto = "auto";

struct ResumedFrom {
  std::string dir;  // the step directory loaded
  std::int64_t step = 0;
  std::vector<ConfigChange> changes;  // config keys changed since that checkpoint
};

// `resume`: "auto" (the newest intact checkpoint under `checkpoint_root`; none at all: a fresh start, nullopt), a
// checkpoint root (the same under it), or a step directory (that one; damaged: an Error naming the file and
// pointing at --resume auto). `allowed`: --allow-config-change. Collective.
std::optional<ResumedFrom> resume_from_checkpoint(const RunParts& run, const std::string& resume,
                                                  const std::string& checkpoint_root,
                                                  const std::vector<std::string>& allowed);

// The --resume argument read before any work (cleave train, before the world and the model): a path that is no
// directory, or a directory holding no checkpoint at all (no index.json, no step_NNNNNNN/), is an InputError naming it
// and the forms --resume takes. "" and "auto" pass. Reads the directory listing only.
void check_resume_argument(const std::string& resume);

// Whether `resume` continues a checkpoint rather than starting fresh: every --resume but `auto` names one (or is
// refused), and `auto` continues when `checkpoint_root` holds a step directory (intact or damaged: damage is
// resume_from_checkpoint's error or fallback, never a fresh start). Only lists the root. For --init-from with
// --resume: the source's weights start the run only when this is false.
bool resume_continues_a_run(const std::string& resume, const std::string& checkpoint_root);

}  // namespace cleave::train
