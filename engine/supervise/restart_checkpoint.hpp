// The checkpoint a restart of `cleave run` continues from (supervisor.hpp): before the restart, the newest that
// passes the quick check (engine/checkpoint/quick_check.hpp); after it, the record corrected when the trainer found
// damage the quick check cannot see and fell back further.
// Invariant: the supervisor only reads checkpoints; nothing here renames, deletes or writes under the checkpoint root.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/supervise/restart_record.hpp"

namespace cleave::supervise {

// The checkpoint a restart's --resume auto continues from: the newest that passes the quick check (index.json and
// the files' headers). A newer damaged one is named once in the log, with why. When there are checkpoints and the
// quick check finds every one damaged, `no_intact` is the trainer's own NoIntactCheckpoint message: the restart would
// stop with it at its load.
struct RestartFrom {
  std::optional<std::string> checkpoint;
  std::optional<std::string> no_intact;
};
RestartFrom restart_checkpoint(const std::string& root);

// The step of a step_N checkpoint directory; 0 without one.
std::int64_t checkpoint_step(const std::optional<std::string>& checkpoint);

// A restart whose job resumed from an older checkpoint than `r` states (its row in `metrics_path` says so): the
// record follows the job (checkpoint under `ckpt_root`, step, steps redone and their time, from the failed attempt's
// rows kept as `records_dir`/attempt_N.metrics.jsonl), and the log says so once. Nothing when they agree.
void follow_fallback(RestartRecord& r, const std::string& ckpt_root, const std::string& records_dir,
                     const std::string& metrics_path);

}  // namespace cleave::supervise
