// Checkpoint save and load over one rank's parts (the Trainer's save_checkpoint / load_checkpoint call these).
// Format: checkpoint_pieces.hpp (what a rank holds and owns) and checkpoint_save.cpp (index.json). Both are
// collective over the world; an error on any rank is thrown on every rank, before anything is assigned.
#pragma once

#include <cstdint>
#include <string>

#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/step_tail.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::train {

// Saves the state after `steps_done` steps as `root`/step_NNNNNNN (atomic), then prunes to
// checkpoint.keep_last. Every rank returns the same stats.
CheckpointSaveStats save_checkpoint(RankSetup& setup, RankModel& model, StepTail& tail, const std::string& root,
                                    std::int64_t steps_done);

// Loads parameters, optimizer state and step count saved under any layout of the same model; returns the
// steps the checkpoint holds. `continue_run`: the checkpoint must continue this run's random streams.
std::int64_t load_checkpoint(RankSetup& setup, RankModel& model, StepTail& tail, const std::string& step_dir,
                             bool continue_run);

}  // namespace cleave::train
