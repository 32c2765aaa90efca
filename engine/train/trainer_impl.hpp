// Trainer::Impl: the parts one rank's Trainer owns and the wiring between them (internal to engine/train: the
// public type is trainer.hpp). Its constructor builds, in order, the RankSetup, the RankModel, the StepTail, the
// data sources and the two executors (training, and evaluation when train.eval_batches > 0), whose options share
// one placement (placement_options()). trainer.cpp holds the public calls, train_loop.cpp the run loop.
//
// Invariants: members are built in declaration order and each reads only those above it; pending_save is declared
// after every part its background writer reads (setup, model, tail), so the writer is joined before they go.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/train/checkpoint/checkpoint_io.hpp"
#include "engine/train/data/data_source.hpp"
#include "engine/train/fault_injection.hpp"
#include "engine/train/rank_model.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/router_metrics.hpp"
#include "engine/train/step_tail.hpp"
#include "engine/train/throughput.hpp"
#include "engine/train/trainer.hpp"
#include "pipeline/executor.hpp"

namespace cleave::train {

using TrainerClock = std::chrono::steady_clock;

// Milliseconds since `since`.
inline double elapsed_ms(TrainerClock::time_point since) {
  return std::chrono::duration<double, std::milli>(TrainerClock::now() - since).count();
}

// What the ranks agree on at a step's end (Trainer::Impl::agree_on_step_end).
struct StepEnd {
  std::int64_t peak_bytes = 0;  // the largest allocator peak of any rank
  bool stop_requested = false;  // some rank received the save-and-stop signal
};

struct Trainer::Impl {
  Impl(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend,
       std::optional<run_plan::Plan> planned = std::nullopt);

  // The step's loss: the mean over the global batch's micro-batches (see the definition).
  double global_mean_loss(const pipeline::StepOutcome& outcome);

  RankSetup setup;
  RankModel model;
  std::optional<FaultPlan> fault;  // usually empty
  std::int64_t current_step = 0;   // the step running (0-based): fault hooks read it
  StepTail tail;
  RouterMetrics router_metrics{setup.plan.spec};  // mixture-of-experts models' routing fields
  Throughput throughput;           // model FLOPs per step; the peak comes with train()'s options
  std::unique_ptr<DataSource> train_data;
  std::unique_ptr<DataSource> eval_data;
  BatchLayout layout;
  std::unique_ptr<pipeline::Executor> executor;       // the training step
  pipeline::Schedule eval_schedule;                   // forward-only (pipeline/forward_only.hpp)
  std::unique_ptr<pipeline::Executor> eval_executor;  // evaluation through the same interpreter
  std::vector<pipeline::TimedAction> last_timeline;
  Tensor microbatch_losses;  // [dp * micro-batches] f32 (host): the step's loss of every global micro-batch
  std::vector<Tensor> staged_batches;  // host halves of this step's uploads (on_run_device), freed at its end
  // A checkpoint being written in the background (checkpoint.background), committed by the first step that finds
  // every rank's writer done, the next save or the end of the run. Last member: its writer is joined first.
  std::unique_ptr<CheckpointSave> pending_save;
  std::optional<std::pair<std::int64_t, double>> committed_in_step;  // (step saved, ms), for train()'s log
  std::string init_from;  // run.json "init_from": the --init-from source and the context length taken

  // One reduction over the world at a step's end: the peaks, whether a background checkpoint's writer is still
  // writing anywhere (none: pending_save is committed now, committed_in_step set) and the save-and-stop request
  // (stop_request.hpp: every rank sees one that reached any rank). Collective.
  StepEnd agree_on_step_end();
  // Commits pending_save (waiting for the writers); collective. Returns how long that took.
  double commit_pending_save();
  // checkpoint.background: the snapshot, the writer started; else the whole save. Collective.
  void save_in_train_loop(const std::string& root, std::int64_t steps_done);

  // The executors' options: the placement and loss scale both share, then each one's data and hooks.
  pipeline::ExecutorOptions placement_options();
  pipeline::ExecutorOptions training_options();
  pipeline::ExecutorOptions evaluation_options();
  // Micro-batch `microbatch` of `source`'s batch `batch`: this cp rank's share, on the run's device, inputs in the
  // compute dtype.
  pipeline::MicrobatchData load_microbatch(DataSource& source, std::int64_t batch, int microbatch);
};

}  // namespace cleave::train
