// `cleave train [CONFIG] [--set key=value ...]`: loads and resolves the config, starts the MPI runtime
// (a plain run is a world of one), builds the world communicator parallel.comm_backend asks for
// (engine/comm/make_communicator.hpp; logged, and recorded in the resolved config.json), builds the trainer
// for this rank and runs it. The trainer's world rank 0 writes report.html into the run directory at the end,
// or after a failure with the steps that finished (train.report, default on; engine/report/html_report.hpp).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cli/commands.hpp"
#include "engine/comm/make_communicator.hpp"
#include "engine/comm/mpi/mpi_runtime.hpp"
#include "engine/comm/mpi/wait_notice.hpp"
#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/train/config_change.hpp"
#include "engine/train/threads.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::cli {
namespace {

constexpr const char* kUsage = R"(usage: cleave train [CONFIG.json] [--set key.path=value ...] [--resume auto|PATH]

Trains the model described by CONFIG (JSON, docs/config.md; no file = a tiny GPT on a synthetic task).
Writes config.json (fully resolved), metrics.jsonl, run.json (layout, per-rank memory) and report.html (curves,
memory against the cap, layout, config; train.report false skips it, `cleave report DIR` redoes it) into
train.out_dir; refuses an output directory that already holds a run. On a terminal the progress is a live bar
with an ETA; redirected to a file it is plain lines.

options:
  --set key.path=value   override one config key, e.g. --set optimizer.lr=3e-4 --set train.steps=100
                         (value parsed as JSON when it parses, else as a string)
  --resume auto|PATH     continue a run from a checkpoint: auto = the latest complete one under
                         checkpoint.dir (default <train.out_dir>/checkpoints; a fresh start when there is
                         none), or PATH = a step_NNNNNNN directory (or a directory holding them). The layout
                         may differ from the one it was saved under. metrics.jsonl keeps rows up to the
                         checkpoint's step and continues after it. The config is compared with the one
                         the checkpoint was trained with: keys of length, logging, evaluation, checkpoint
                         cadence and layout (train.steps, train.*_interval, checkpoint.*, parallel.*, the
                         micro-batch split, optimizer.zero_stage, train.recompute, device.memory_limit)
                         may change; any other change is refused with both values unless allowed below.
                         Changes are logged and recorded in run.json ("resumes"), metrics.jsonl
                         ("resumed_at_step", "config_changes") and the old config.json is kept as
                         config.before_step_K.json.
  --allow-config-change KEY[,KEY...]
                         with --resume: allow these keys to differ from the checkpoint's config
                         (e.g. optimizer.lr,optimizer.warmup_steps)
  --help                 this text

checkpoints: checkpoint.interval N saves every N steps (0 = only the final one, checkpoint.save_final),
             checkpoint.keep_last K keeps the newest K.

multi-rank:  mpirun -np 8 cleave train CONFIG --set parallel.pipeline_model_parallel_size=4
examples:    cleave train examples/gpt_fortunes.json
             cleave train examples/cnn_digits.json --set train.steps=200 --set train.out_dir=runs/cnn
)";

}  // namespace

int run_train(int argc, char** argv) {
  std::string config_path;
  std::vector<std::string> overrides;
  train::TrainOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--set") {
      CLEAVE_CHECK(i + 1 < argc, "train: --set needs a key.path=value argument");
      overrides.emplace_back(argv[++i]);
    } else if (arg == "--resume") {
      CLEAVE_CHECK(i + 1 < argc, "train: --resume needs 'auto' or a checkpoint directory");
      options.resume = argv[++i];
    } else if (arg == "--allow-config-change" || arg.starts_with("--allow-config-change=")) {
      std::string keys;
      if (arg == "--allow-config-change") {
        CLEAVE_CHECK(i + 1 < argc, "train: --allow-config-change needs KEY[,KEY...] (e.g. optimizer.lr)");
        keys = argv[++i];
      } else {
        keys = arg.substr(std::strlen("--allow-config-change="));
      }
      for (auto& key : train::split_key_list(keys)) options.allow_config_change.push_back(std::move(key));
    } else if (arg.starts_with("--resume=")) {
      options.resume = arg.substr(9);
    } else if (arg.starts_with("--set=")) {
      overrides.emplace_back(arg.substr(6));
    } else if (arg.starts_with("-")) {
      CLEAVE_THROW("train: unknown option '{}' (see cleave train --help)", arg);
    } else {
      CLEAVE_CHECK(config_path.empty(), "train: more than one config file given ('{}' and '{}')", config_path, arg);
      config_path = arg;
    }
  }
  CLEAVE_CHECK(options.allow_config_change.empty() || !options.resume.empty(),
               "train: --allow-config-change applies to a resumed run; give --resume auto|PATH too");
  comm::MpiRuntime runtime(&argc, &argv);
  log::set_rank(runtime.world_rank(), runtime.world_size());
  comm::report_waits_on_sigterm();  // a rank the launcher ends says what it was waiting for
  try {
    train::configure_threads_for_node();
    config::RunConfig config = config::load_config(config_path, overrides);
    comm::World world = comm::make_world_communicator(
        runtime, config.parallel.comm_backend, config.device.type,
        comm::CommOptions{.timeout_s = config.train.comm_timeout_s, .deterministic = config.train.deterministic},
        config.parallel.p2p_progress);
    if (runtime.world_rank() == 0) log::info("comm backend {} ({})", world.comm->backend(), world.choice.reason);
    const char* single_copy = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    if (runtime.world_rank() == 0 && config.parallel.pipeline_model_parallel_size > 1 && single_copy != nullptr &&
        std::string(single_copy) == "none" && !world.progress_thread) {
      log::warn("Open MPI single copy is off (btl_vader_single_copy_mechanism=none) and parallel.p2p_progress is "
                "\"{}\" without a progress thread: pipeline messages above 4 KiB move only while the sender is inside "
                "MPI, which costs zero-bubble schedules their gain; set parallel.p2p_progress to \"auto\" or use cma "
                "where the container allows it (docs/multi-rank.md)",
                config.parallel.p2p_progress);
    }
    config.parallel.comm_backend = world.choice.backend;  // the resolved config.json records what ran
    train::Trainer trainer(config, *world.comm);
    const train::TrainSummary summary = trainer.train(options);
    return summary.completed ? 0 : 1;
  } catch (const std::exception& e) {
    // With peers, end the job here (comm/mpi/mpi_runtime.hpp): an error every rank hit is printed once and the
    // job exits cleanly; a failure on one rank (say rank 0's output-directory check) aborts it now, not after
    // the watchdog.
    if (runtime.world_size() > 1) comm::end_job_after_error(fmt::format("error: {}", e.what()));
    throw;
  }
}

}  // namespace cleave::cli
