// `cleave train [CONFIG] [--set key=value ...]`: loads and resolves the config, starts the command runtime
// (runtime_env.hpp: MPI, a plain run is a world of one; threads and pinning; the world communicator
// parallel.comm_backend asks for, logged and recorded in the resolved config.json), builds the trainer
// for this rank and runs it. The trainer's world rank 0 writes report.html into the run directory at the end,
// or after a failure with the steps that finished (train.report, default on; engine/report/html_report.hpp).
// --profile FILE gives the peak FLOP/s per rank that MFU is measured against (engine/train/throughput.hpp).
// Bad input (an unknown option, config key or value, a typo in --allow-config-change, a layout the world size does
// not divide or cannot plan, a memory plan over device.memory_limit or, for the ranks on this host together, over
// 90% of its physical memory (engine/run_plan/host_fit.hpp), a train.out_dir that is a file or, without
// --resume, holds a run, a --resume PATH holding no checkpoint, a --profile that cannot be read or describes another
// device) is an InputError raised before the world and the trainer are built: `cleave` exits ExitCode::kBadInput
// and `cleave run` does not restart.
// SIGUSR1 (what `cleave run` forwards on SIGTERM) saves a checkpoint at the next step and exits 0 with a log line
// saying so (engine/train/stop_request.hpp).
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cli/args.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/init_tokenizer_check.hpp"
#include "engine/cli/runtime_env.hpp"
#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/train/checkpoint/config_change.hpp"
#include "engine/train/checkpoint/resume_fallback.hpp"
#include "engine/train/checkpoint/weight_source.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/metrics.hpp"
#include "engine/train/rank_setup.hpp"
#include "engine/train/stop_request.hpp"
#include "engine/train/trainer.hpp"

namespace cleave::cli {
namespace {

ArgParser train_args() {
  ArgParser p("train", "cleave train [CONFIG.json] [--set key.path=value ...] [--init-from DIR] [--resume auto|PATH]",
              R"(Trains the model described by CONFIG (JSON, docs/config.md; no file = a tiny GPT on a synthetic task).
Writes config.json (fully resolved), metrics.jsonl, run.json (layout, per-rank memory) and report.html (curves,
memory against the cap, layout, config; train.report false skips it, `cleave report DIR` redoes it) into
train.out_dir; refuses an output directory that already holds a run. On a terminal the progress is a live bar
with an ETA; redirected to a file it is plain lines.)");
  p.positional("CONFIG.json", "config file")
      .config_overrides()
      .text("--resume", "auto|PATH",
            "continue a run from a checkpoint: auto = the latest complete one under\n"
            "checkpoint.dir (default <train.out_dir>/checkpoints; a fresh start when there is\n"
            "none, the earlier run's files moved to <train.out_dir>/earlier_attempt_N/), or\n"
            "PATH = a step_NNNNNNN directory (or a directory holding them). The layout may\n"
            "differ from the one it was saved under. metrics.jsonl keeps rows up to the\n"
            "checkpoint's step and continues after it. The config is compared with the one\n"
            "the checkpoint was trained with: keys of length, logging, evaluation, checkpoint\n"
            "cadence and layout (train.steps, train.*_interval, checkpoint.*, parallel.*, the\n"
            "micro-batch split, optimizer.zero_stage, train.recompute, device.memory_limit)\n"
            "may change; any other change is refused with both values unless allowed below.\n"
            "Changes are logged and recorded in run.json (\"resumes\"), metrics.jsonl\n"
            "(\"resumed_at_step\", \"config_changes\") and the old config.json is kept as\n"
            "config.before_step_K.json.")
      .text("--init-from", "DIR",
            "start from these weights: a Hugging Face model directory (config.json +\n"
            "safetensors; GPT-2, Llama, Mistral, Qwen2/3, Mixtral, Qwen2/3-MoE: docs/models.md)\n"
            "or a Cleave checkpoint (e.g. from cleave import). Any layout; the optimizer\n"
            "starts fresh at step 0. The model keys the weights fix are taken from them; a\n"
            "CONFIG value that differs is refused. With --resume too (the same command line\n"
            "restarted, as cleave run does): the run's checkpoint when there is one, else DIR.")
      .text("--profile", "FILE",
            "a hardware profile of the run's device.type (profiles/*.json for cuda, or one\n"
            "cleave profile wrote): MFU per step against its peak FLOP/s for the run's dtype\n"
            "(the sustained GEMM rate when the profile has no peak). Without it the achieved\n"
            "TFLOP/s per rank is shown, no MFU.")
      .text("--restart-record", "FILE",
            "written by cleave run on a restart (docs/multi-rank.md, \"Recovery\"): the restart's\n"
            "number and launch time, put on the first metrics row with its start-up, checkpoint\n"
            "load and first-step times")
      .repeated("--allow-config-change", "KEY[,KEY...]",
                "with --resume: allow these keys to differ from the checkpoint's config\n"
                "(e.g. optimizer.lr,optimizer.warmup_steps)")
      .epilog(R"(checkpoints: checkpoint.interval N saves every N steps (0 = only the final one, checkpoint.save_final),
             checkpoint.keep_last K keeps the newest K.

multi-rank:  mpirun -np 8 cleave train CONFIG --set parallel.pipeline_model_parallel_size=4
examples:    cleave train examples/gpt_fortunes.json
             cleave train examples/cnn_digits.json --set train.steps=200 --set train.out_dir=runs/cnn)");
  return p;
}

// One rank's peak FLOP/s for the run's compute dtype: the profile's peak (a roofline profile), else its sustained
// GEMM rate (a measured CPU profile has only that; the source says which). A profile of another device than the
// run's (a cuda profile for a cpu run) is bad input: MFU against a peak the run's device does not have says nothing.
train::PeakFlops peak_of(const std::string& path, const config::RunConfig& run) {
  const planner::HardwareProfile profile = reading_input([&] { return planner::load_profile(path); });
  const std::string_view run_device = enum_name(run.device.type), profile_device = enum_name(profile.device_type);
  CLEAVE_CHECK_INPUT(profile.device_type == run.device.type,
                     "train: --profile {} describes a {} machine ({}), but this run trains on device.type \"{}\": MFU "
                     "against that peak would measure this run against hardware it does not use; nothing was started "
                     "(give a profile of this {} machine, e.g. cleave profile CONFIG --out here.json, or drop --profile "
                     "for the achieved FLOP/s per rank without MFU)",
                     path, profile_device, profile.name, run_device, run_device);
  const bool bf16 = run.device.precision == config::Precision::kBf16;
  const double peak = bf16 ? profile.peak_flops_bf16 : profile.peak_flops_f32;
  const double rate = peak > 0 ? peak : profile.flops(bf16);
  return {rate, fmt::format("{} {} {:.4g} TFLOP/s of {} ({})", bf16 ? "bf16" : "f32",
                            peak > 0 ? "peak" : "sustained GEMM rate", rate / 1e12, profile.name, path)};
}

}  // namespace

int run_train(int argc, char** argv) {
  const ArgParser parser = train_args();
  const Args args = parser.parse(argc, argv);
  if (parser.print_help_if_asked(args)) return 0;
  const std::string config_path = args.positional(0);
  const std::vector<std::string> overrides = args.all("--set");
  train::TrainOptions options;
  options.resume = args.text("--resume");
  options.restart_record = args.text("--restart-record");
  for (const auto& list : args.all("--allow-config-change")) {
    for (auto& key : train::split_key_list(list)) options.allow_config_change.push_back(std::move(key));
  }
  if (!options.allow_config_change.empty() && options.resume.empty()) {
    throw InputError("train: --allow-config-change applies to a resumed run; give --resume auto|PATH too");
  }
  const std::string init_from = args.text("--init-from");
  const std::string profile_path = args.text("--profile");
  CommandRuntime runtime(&argc, &argv);
  return runtime.run([&] {
    const train::ThreadPlacement& placement = runtime.place_threads();
    std::optional<train::WeightSource> init;
    if (!init_from.empty()) init = train::open_weight_source(init_from);
    config::RunConfig config = init ? train::config_for_init(config_path, overrides, *init)
                                    : config::load_config(config_path, overrides);
    // A layout or batch the world size does not divide (RunConfig::resolve, on a copy): bad input every rank finds
    // alike from the same config and world size, so all exit 64 together, before any file is read or the world built.
    // A refused key is named with where it came from ("config FILE: key: ..."), as the config reader names it.
    config::RunConfig(config).resolve(runtime.world_size(), config_path.empty() ? "<defaults>" : config_path,
                                      overrides);
    // The plan every rank will make (its memory against device.memory_limit, and this host's ranks against its
    // physical memory, among it): bad input alike on every rank, refused before the files are read and the world built
    // (it exited 1 once the world was up, or the OOM killer ended it). Made once: the trainer takes it.
    run_plan::Plan plan = train::plan_before_world(config, runtime.world_size(),
                                                   config_path.empty() ? "<defaults>" : config_path, overrides,
                                                   this_host(placement));
    if (init) check_shards_match_source_tokenizer(config, *init);
    train::check_data_files(config);  // a missing or malformed data file: bad input, before the world and the model
    // An out_dir that is a file, or (a fresh run) holds another run: bad input, before the world and the model (the
    // trainer's own check, made once they are built, is kept for the checkpoint.dir it resolves).
    check_output_dir("train.out_dir", config.train.out_dir);
    if (options.resume.empty()) train::check_out_dir_holds_no_run(config.train.out_dir);
    // checkpoint.dir (every cleave train saves, at least on SIGUSR1): a file there, or (a fresh run) another run's
    // checkpoints, before the world and the model (they were found once both were built; the trainer still checks
    // on every rank).
    check_output_dir("checkpoint.dir", train::checkpoint_root_of(config));
    if (options.resume.empty()) train::check_checkpoint_dir_holds_no_run(train::checkpoint_root_of(config));
    train::check_resume_argument(options.resume);  // no such directory, or none holding a checkpoint
    // A typo in --allow-config-change stops here, before the world and the trainer are built (not at the resume).
    train::check_allowed_keys(options.allow_config_change, nlohmann::json::parse(config::to_json(config)));
    // --profile (MFU's peak): a file the command line names, read before the world (missing or malformed: exit 64).
    if (!profile_path.empty()) options.peak = peak_of(profile_path, config);
    comm::World world = runtime.world(config);
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
    train::Trainer trainer(config, std::move(plan), *world.comm);
    if (init) options.init = &*init;  // loaded by train() once the output paths are checked
    train::install_stop_request_handler();  // SIGUSR1: save a checkpoint at the next step and stop
    options.save_on_signal = true;           // so checkpoint.dir is checked at start even without interval or final save
    const train::TrainSummary summary = trainer.train(options);
    // A stop on request exits 0 on every rank: under mpirun a rank's non-zero exit would end its peers while they
    // still finish the run's files; the log line (and cleave run's own exit code 75) say it stopped early.
    return summary.completed ? 0 : 1;
  });
}

}  // namespace cleave::cli
