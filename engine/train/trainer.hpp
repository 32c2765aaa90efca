// Trainer: one process's share of a training run — dp × pp (× tp) layout, model stages, optimizer, data — as
// owned parts: RankSetup (grid, memory, op context, plan), RankModel (stages, parameters, the tied table),
// StepTail (gradient reduction, clipping, update) and the executors; the Trainer keeps the loop.
//
// One step = run this rank's lowered pipeline schedule through the Executor (which, with pp = 1, is plain
// gradient accumulation); its REDUCE_GRAD and OPTIMIZER_STEP actions reduce gradients over data-parallel
// replicas and across the tied embedding's two copies, clip by the true global norm (each parameter counted
// once), and step the optimizer. Evaluation runs a forward-only schedule through the same executor.
//
// Invariants: every rank builds the same plan from the same config (no runtime negotiation); parameters
// are initialised from (seed, logical name), so every layout starts from the same logical weights and a
// layout can be compared with a single rank step by step (tests/mpi/train_equivalence_test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/config/config.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/train/checkpoint/checkpoint_save_stats.hpp"
#include "engine/train/checkpoint/weight_source.hpp"
#include "engine/train/eval_result.hpp"
#include "engine/train/throughput.hpp"
#include "kernels/ops/host_waits.hpp"
#include "pipeline/timeline.hpp"

namespace cleave::ops {
struct Backend;  // kernels/ops/backend.hpp
}

namespace cleave::train {

struct StepStats {
  std::int64_t step = 0;
  double loss = 0;       // mean over the global batch
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_ms = 0;
  double tokens_per_s = 0;       // items (tokens, or samples for mlp/cnn) per second, global
  double flops_per_rank = 0;     // achieved model FLOP/s per rank (throughput.hpp)
  double mfu = 0;                // flops_per_rank / the peak given to train(); NaN without one
  bool skipped = false;          // the gradient norm was not finite: no update was applied
  std::int64_t peak_bytes = 0;   // max over ranks of the allocator's peak so far
  std::int64_t p2p_bytes = 0;    // boundary bytes (activations, gradients) this rank sent to other pp ranks
  int overlapped_pairs = 0;      // parallel.moe_a2a_overlap: F&B pairs this rank ran interleaved this step
  int pair_hand_overs = 0;       // baton passes inside them (pipeline/overlap_pair.hpp)
  std::int64_t dp_grad_bytes = 0;  // bytes this rank's data-parallel gradient collectives carried (0 without dp)
  // Mixture-of-experts models: the routing fields of the step (engine/train/router_metrics.hpp), on every rank. The
  // trainer keeps them: valid until its next step() (copy them to keep them longer); TrainSummary's steps hold none.
  std::span<const std::pair<std::string, double>> routing;
  bool stop_requested = false;     // some rank received the save-and-stop signal (stop_request.hpp) by this step
};

struct TrainSummary {
  bool completed = false;
  bool stopped = false;  // ended early on the save-and-stop signal, after saving a checkpoint (stop_request.hpp)
  std::vector<StepStats> steps;
  EvalResult eval;  // items == 0 when no evaluation ran
  std::int64_t peak_bytes = 0;
};

// How train() starts. resume: "" = a fresh run; "auto" = the latest complete checkpoint under
// checkpoint.dir, or a fresh start when there is none; otherwise a checkpoint directory (step_NNNNNNN) or a
// checkpoint.dir-style root (its latest complete checkpoint). allow_config_change: keys a resumed run may
// change beyond those that change freely (engine/train/checkpoint/config_change.hpp).
// init (train --init-from; may be null): weights loaded by train() after its output paths are checked, so a bad
// path fails before any load. peak: one rank's peak FLOP/s that MFU is measured against (cleave train --profile;
// throughput.hpp); none = no MFU, the achieved FLOP/s is reported all the same.
// restart_record (set by `cleave run` on a restart; engine/supervise/): a JSON file {"restart": N,
// "launched_unix_s": T} whose numbers world rank 0 puts on the first metrics row with the restart's start-up
// (T to the checkpoint load), checkpoint load and first step times (restart, restart_startup_s, restart_load_s,
// restart_first_step_s).
struct TrainOptions {
  std::string resume;
  std::string restart_record;
  std::vector<std::string> allow_config_change;
  const WeightSource* init = nullptr;
  PeakFlops peak;
  // SIGUSR1 saves a checkpoint and stops (cleave train installs the handler: stop_request.hpp). Such a run may save
  // whatever checkpoint.interval and checkpoint.save_final say, so its checkpoint.dir is checked at start as any
  // saving run's is (writable, not a file, not another run's).
  bool save_on_signal = false;
  // Called on every rank at the end of each step of train()'s loop (its metrics row written, its checkpoint, if
  // any, taken) with the steps done so far; may be empty. Instrumentation only: the steady-state heap test counts
  // the allocations of the loop's steps between two calls (tests/e2e/steady_state_heap_test.cpp).
  std::function<void(std::int64_t steps_done)> after_step;
};

class Trainer {
 public:
  // `world` must outlive the trainer. Resolves the config against world.size() and builds this rank's
  // stages, optimizer and data sources. Throws Error for layouts or configs that cannot work.
  // `backend` (tests only): the op slot table every op of the run's context calls instead of the device's
  // (Context::backend), e.g. a recording wrapper; null = the device's backend.
  Trainer(config::RunConfig config, comm::Communicator& world, const ops::Backend* backend = nullptr);
  // The same with the plan train::plan_before_world made of this config at world.size() before the world was built
  // (`cleave train`, `cleave verify`): taken as it is, not made again (RankSetup).
  Trainer(config::RunConfig config, run_plan::Plan plan, comm::Communicator& world);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The whole run: output directory, metrics, progress, evaluation, checkpoints, summary, run.json and (on world
  // rank 0, train.report) report.html, also written when a step throws. Collective.
  // Before anything is loaded or run, train.out_dir (rank 0) and the checkpoint root (every rank, when the run
  // saves) are checked writable (engine/core/output_path.hpp); an error names the key and the path.
  // Resuming at step k keeps metrics.jsonl rows 1..k and appends from k + 1.
  // A step whose loss or gradient norm is not finite applies no update; more than train.skip_nonfinite_steps of
  // them in a row stop the run with an error naming the step.
  TrainSummary train(const TrainOptions& options = {});
  // One optimizer step (0-based). Collective.
  StepStats step(std::int64_t step);
  // Mean loss and accuracy over `batches` global evaluation batches. Collective.
  EvalResult evaluate(std::int64_t batches);
  // Every logical parameter by name, gathered onto every rank (for equivalence checks). Collective.
  std::map<std::string, std::vector<float>> gather_parameters();
  // One optimizer state kind ("exp_avg", "exp_avg_sq", "momentum_buffer") of every parameter by name, on a run of one
  // rank on the CPU whose plain optimizer holds each parameter whole (`cleave verify`'s reference; CLEAVE_CHECK
  // otherwise); a parameter without that state is absent.
  std::map<std::string, std::vector<float>> local_optimizer_state(const std::string& kind) const;

  // The last step's measured timeline of every pp rank of replica 0, merged on world rank 0 (times in ms
  // from the earliest action; empty on other ranks). Needs train.trace. Collective.
  pipeline::Timeline measured_timeline();

  // Checkpoints (checkpoint_io.hpp; format in checkpoint_pieces.hpp).
  // Saves the state after `steps_done` steps as `root`/step_NNNNNNN (atomic: engine/checkpoint/
  // checkpoint_dir.hpp), then prunes to checkpoint.keep_last. Collective; every rank returns the same stats.
  CheckpointSaveStats save_checkpoint(const std::string& root, std::int64_t steps_done);
  // Loads parameters, optimizer state and step count from a step directory saved under any layout of the
  // same model; returns the steps it holds (the next step to run). Every check (model, shapes, files,
  // sizes, checksums) happens before anything is assigned; on any error every rank throws. Collective.
  // `continue_run` (train --resume): the checkpoint must also continue this run's random streams, i.e.
  // its rng seed equals train.seed and its consumed samples equal step x batch.global_batch_size.
  // A weights-only checkpoint (`cleave import`, weights_only.hpp) loads its parameters only and returns 0;
  // with continue_run it is refused (there is no run to continue; train --init-from starts from it).
  std::int64_t load_checkpoint(const std::string& step_dir, bool continue_run = false);
  // Every parameter from `source` (train --init-from; weight_source.hpp), any layout; the optimizer state and
  // the step stay as they are (fresh before train()). Collective.
  void load_weights(const WeightSource& source);
  // Generation (generation.hpp; one rank, one stage, no tensor parallelism): the logits of the token after
  // `tokens` (1 <= size <= model.seq_len), model.vocab_size values. Keeps nothing for a backward.
  std::vector<float> next_token_logits(const std::vector<std::int32_t>& tokens);
  // checkpoint.dir, or <train.out_dir>/checkpoints when empty.
  std::string checkpoint_root() const;

  const config::RunConfig& config() const;
  const run_plan::Plan& plan() const;
  // This run's memory (its own allocator: every parameter, gradient, state and activation of the run).
  MemoryStats memory_stats() const;
  // The host waits this rank's run has made so far, by kind (kernels/ops/host_waits.hpp: every "(host value)" op
  // of the seam; on the CPU the same calls are counted). Take a copy before and use since() for a window.
  ops::HostWaits host_waits() const;
  void reset_peak_memory();

  struct Impl;  // the parts (rank_setup.hpp, rank_model.hpp, step_tail.hpp) and the executors; trainer_impl.hpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cleave::train
