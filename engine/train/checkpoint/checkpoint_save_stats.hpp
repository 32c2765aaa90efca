// What a committed checkpoint save reports (checkpoint_io.hpp's CheckpointSave::commit and save_checkpoint, the
// Trainer's save_checkpoint). A value type of its own so that the Trainer's header can name it without the
// checkpoint code depending on the Trainer: engine/train/checkpoint/ takes the Trainer's parts (RankSetup,
// RankModel, StepTail) as arguments and never includes engine/train/trainer.hpp.
#pragma once

#include <cstdint>
#include <string>

namespace cleave::train {

struct CheckpointSaveStats {
  std::string path;        // the committed step_NNNNNNN directory
  std::int64_t bytes = 0;  // all files of the checkpoint (every rank's shards and index.json)
  int files = 0;
  double ms = 0;           // from the snapshot to the commit, as rank 0 sees it
  double pause_ms = 0;     // how long the step loop waited for this save (train(); the slowest rank)
};

}  // namespace cleave::train
