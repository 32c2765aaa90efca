// Checkpoint save and load over one rank's parts (the Trainer's save_checkpoint / load_checkpoint call these).
// Format: checkpoint_pieces.hpp (what a rank holds and owns) and checkpoint_save.cpp (index.json). Both are
// collective over the world; an error on any rank is thrown on every rank, before anything is assigned.
//
// A save has three phases (CheckpointSave):
//  1. snapshot (collective; the step loop waits): world rank 0 creates `.tmp-step_NNNNNNN/`, every rank copies
//     the pieces it owns to host memory (device pieces through ops::to_host) and rank 0 records the step's
//     index fields (lr, optimizer steps, rng), so the step loop may change every tensor afterwards;
//  2. write (file I/O only, no communication, no device): each rank writes its safetensors file into the
//     temporary directory, on a background thread the CheckpointSave owns (or inline when not background);
//  3. commit (collective): every rank's writer is waited for, errors are shared (thrown on every rank, naming
//     the path), rank 0 writes index.json last and renames the directory into place (checkpoint_dir.hpp), then
//     prunes. A crash before 3 ends leaves the previous checkpoint the newest complete one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "engine/train/checkpoint/checkpoint_save_stats.hpp"
#include "engine/train/fault_injection.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/step_tail.hpp"

namespace cleave::train {

struct RankSaveJob;  // checkpoint_save.cpp: one rank's snapshot and what its writer produced

class CheckpointSave {
 public:
  // Phase 1, collective. `background`: phase 2 runs on a thread started here; otherwise inline, writing
  // straight from the live tensors (no snapshot copy). `fault` (tests, CLEAVE_FAULT_INJECT WHERE save): fired
  // by the writer after this rank's file is written. Throws on every rank when any rank fails.
  CheckpointSave(RankSetup& setup, RankModel& model, StepTail& tail, std::string root, std::int64_t steps_done,
                 bool background, std::optional<FaultPlan> fault = std::nullopt);
  // Joins the writer (waiting for it); an error never collected by commit() is logged with its path.
  ~CheckpointSave();
  CheckpointSave(const CheckpointSave&) = delete;
  CheckpointSave& operator=(const CheckpointSave&) = delete;

  // Whether this rank's writer is still running (local, never blocks).
  bool writing() const { return !written_.load(std::memory_order_acquire); }
  std::int64_t steps_done() const { return steps_done_; }
  // Phase 3, collective, once. Every rank returns the same stats.
  CheckpointSaveStats commit(RankSetup& setup);

 private:
  std::string root_;
  std::int64_t steps_done_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::unique_ptr<RankSaveJob> job_;
  std::atomic<bool> written_{false};
  std::thread writer_;
  bool committed_ = false;
};

// Saves the state after `steps_done` steps as `root`/step_NNNNNNN (atomic), then prunes to
// checkpoint.keep_last: all three phases in the caller's thread. Every rank returns the same stats.
CheckpointSaveStats save_checkpoint(RankSetup& setup, RankModel& model, StepTail& tail, const std::string& root,
                                    std::int64_t steps_done);

// Loads parameters, optimizer state and step count saved under any layout of the same model; returns the
// steps the checkpoint holds. `continue_run`: the checkpoint must continue this run's random streams.
// A weights-only checkpoint (weights_only.hpp) loads its parameters only and returns 0; with continue_run it is
// refused as bad input (InputError: --init-from, not --resume, starts a run from it).
std::int64_t load_checkpoint(RankSetup& setup, RankModel& model, StepTail& tail, const std::string& step_dir,
                             bool continue_run);

}  // namespace cleave::train
