// Trainer::train: the whole run around the steps. In order: the output paths checked, the start point (fresh,
// --init-from, or a checkpoint --resume names, checked and loaded before anything is written; with both, the
// checkpoint when there is one), the run's outputs
// on world rank 0 (directory, config.json, metrics.jsonl, the progress line), the step loop (metrics rows,
// evaluation and checkpoint cadence, the divergence check, the save-and-stop request), then the measured trace,
// run.json and report.html, which a failed run gets too (of the steps it finished).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/report/html_report.hpp"
#include "engine/train/checkpoint/checkpoint_pieces.hpp"
#include "engine/train/checkpoint/checkpoint_reader.hpp"
#include "engine/train/checkpoint/resume.hpp"
#include "engine/train/checkpoint/resume_fallback.hpp"
#include "engine/train/checkpoint/weight_source.hpp"
#include "engine/train/collectives.hpp"
#include "engine/train/measured_trace.hpp"
#include "engine/train/metrics.hpp"
#include "engine/train/run_record.hpp"
#include "engine/train/trainer.hpp"
#include "engine/train/trainer_impl.hpp"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;

// report.html from the run directory's files (engine/report/html_report.hpp). A page that cannot be written is
// a warning: the run's outcome does not depend on it, and `cleave report DIR` makes it later from the same files.
void write_report_page(const std::string& out_dir, std::string_view note) {
  try {
    log::info("report {}{}", report::write_report(out_dir), note);
  } catch (const std::exception& e) {
    log::warn("{} (retry with cleave report {})", e.what(), out_dir);
  }
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Every output path before any work: a checkpoint.dir that is a file, or an out_dir under one, is an error
// now, not after the steps it was meant to keep. Every rank writes checkpoint files; rank 0 the run files. A
// fresh run (no --resume) never writes over another run: an out_dir holding one, or a checkpoint.dir holding
// checkpoints (another run's: the fresh run's saves would replace its steps and prune the rest), is refused
// here, before the weights are read or a step is run. A run that saves only on SIGUSR1 (`save_on_signal`, no interval,
// no final save) is checked as a saving run: the signal's save would otherwise meet an unwritable or foreign
// checkpoint.dir after the steps it was meant to keep.
void check_output_paths(RankSetup& s, const std::string& checkpoints, bool fresh, bool save_on_signal) {
  RankFailure failure;
  try {
    const bool saves = s.config.checkpoint.interval > 0 || s.config.checkpoint.save_final || save_on_signal;
    if (s.reports()) check_output_dir("train.out_dir", s.config.train.out_dir);
    if (saves) check_output_dir("checkpoint.dir", checkpoints);
    if (fresh && s.reports()) {
      const std::filesystem::path out = s.config.train.out_dir;
      std::error_code ec;
      // prepare_out_dir's refusal, without its directory creation (nothing is written before the checks pass).
      if (std::filesystem::exists(out / "metrics.jsonl", ec) || std::filesystem::exists(out / "config.json", ec)) {
        prepare_out_dir(out.string());
      }
      if (saves) check_checkpoint_dir_holds_no_run(checkpoints);
    }
  } catch (const std::exception& e) {
    failure = rank_failure(e);  // bad input on every failing rank stays bad input (exit 64)
  }
  throw_if_any_rank_failed(s.world, failure);
}

// Where train() starts: step 0, or the step a checkpoint holds (train --resume), and how long getting there took.
struct StartPoint {
  std::int64_t step = 0;
  bool resumed = false;
  std::string from;                   // the checkpoint's step directory
  std::vector<ConfigChange> changes;  // config keys changed since the checkpoint
  RestartRecord restart;              // cleave run's restart record (number 0: none)
  double began_unix_s = 0;            // when loading began
  double load_s = 0;                  // how long the checkpoint load took
};

// The checkpoint --resume names (auto: the newest intact one, resume_fallback.hpp) is checked against the config
// and loaded (a checkpoint that cannot be loaded fails before anything is written); none: a fresh start.
StartPoint start_point(Trainer::Impl& impl, const TrainOptions& options, const std::string& checkpoints) {
  RankSetup& s = impl.setup;
  StartPoint start;
  start.restart = read_restart_record(options.restart_record, s.reports());
  start.began_unix_s = unix_seconds();
  const auto began = TrainerClock::now();
  const std::optional<ResumedFrom> resumed =
      options.resume.empty()
          ? std::nullopt
          : resume_from_checkpoint(RunParts{s, impl.model, impl.tail}, options.resume, checkpoints,
                                   options.allow_config_change);
  if (resumed) {
    start.changes = resumed->changes;
    start.step = resumed->step;
    s.source = CheckpointReader(resumed->dir).index().value("source", nlohmann::json());
    start.from = resumed->dir;
    start.resumed = true;
  }
  start.load_s = elapsed_ms(began) * 1e-3;
  return start;
}

// What world rank 0 writes while the run goes; on other ranks the writers are null and only the counts count.
struct RunOutputs {
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<ProgressPrinter> progress;
  StepCounts counts;  // carried on from the kept rows of a resumed run

  // A log line of its own: the live progress line is ended first.
  void interrupt() const {
    if (progress) progress->interrupt();
  }
};

// The run's first log lines: the layout, model, batch and data, then the throughput arithmetic and, on the CPU, the
// GEMM libraries.
void log_run_start(const RankSetup& s, const Throughput& throughput, const DataSource& train_data,
                   const PeakFlops& peak) {
  const auto& cfg = s.config;
  log::info("cleave: {} | {} | model {} ({} in {}: {}) | batch {} = micro {} x accum {} x dp {} | "
            "data {}",
            s.grid.str(), s.plan.describe_schedule(),
            s.plan.spec.type, count_of(static_cast<std::int64_t>(s.plan.spec.blocks.size()), "block"),
            count_of(s.plan.num_stages(), "stage"),
            s.plan.describe_partition(),
            s.batch.global_batch_size, s.batch.micro_batch_size, s.batch.gradient_accumulation_steps,
            s.grid.dp_size(), train_data.describe());
  log::info("throughput: {:.4g} model FLOPs per step (cost model, recomputation not counted; docs/report.md) "
            "shared by {}; {}",
            throughput.model_flops_per_step, count_of(s.world.size(), "rank"),
            peak.per_rank > 0 ? "MFU against the " + peak.source
                              : std::string("no MFU without a peak (cleave train --profile FILE)"));
  // Which library runs the GEMMs (device.blas resolved on this CPU; run.json's cpu_gemm says the same).
  const report::CpuGemmRecord gemm = cpu_gemm_record(cfg);
  if (!gemm.description.empty()) log::info("gemm: {}", gemm.description);
  // Keys accepted that do nothing in this mode by their field's convention (docs/config.md): said once each.
  for (const std::string& note : config::keys_without_effect(cfg)) log::warn("{}", note);
  // Keys that do nothing in this layout (one stage, one rank, no replica to reduce or shard over): said once each.
  const config::LayoutFacts layout{s.world.size(), s.plan.num_stages(), s.grid.dp_size() * s.grid.cp_size()};
  for (const std::string& note : config::keys_without_effect_in_layout(cfg, layout)) log::warn("{}", note);
}

// On world rank 0: the output directory (a resumed run continues in its own: metrics rows after the checkpoint's
// step are dropped, the previous config.json kept when it differs; --resume auto without a checkpoint starts fresh
// with the earlier attempt's run files moved aside, resume.hpp), config.json, the metrics writer, the progress
// line and the first log lines. Elsewhere: nothing.
RunOutputs open_run_outputs(const RankSetup& s, const TrainOptions& options, const StartPoint& start,
                            const Throughput& throughput, const DataSource& train_data) {
  RunOutputs out;
  if (!s.reports()) return out;
  const auto& cfg = s.config;
  const bool resuming = !options.resume.empty();
  if (!resuming) prepare_out_dir(cfg.train.out_dir);
  else std::filesystem::create_directories(cfg.train.out_dir);
  if (start.resumed) keep_previous_config(cfg.train.out_dir, config::to_json(cfg) + "\n", start.step);
  if (resuming && !start.resumed) {  // --resume auto found no checkpoint: a fresh start, over nothing earlier
    const std::string kept = keep_earlier_attempt(cfg.train.out_dir);
    if (!kept.empty()) {
      log::info("resume: no checkpoint to continue, so this is a fresh start; the earlier attempt's run files "
                "(metrics.jsonl, config.json, ...) are kept in {}", kept);
    }
  }
  write_text_file(cfg.train.out_dir + "/config.json", config::to_json(cfg) + "\n");
  const std::string metrics_path = cfg.train.out_dir + "/metrics.jsonl";
  if (resuming) out.counts = keep_metrics_through(metrics_path, start.step);
  out.metrics = std::make_unique<MetricsWriter>(metrics_path, resuming);
  out.progress = std::make_unique<ProgressPrinter>(cfg.train.steps, cfg.train.log_interval,
                                                   std::string(s.plan.spec.throughput_unit()), stderr);
  log_run_start(s, throughput, train_data, options.peak);
  return out;
}

// The metrics row of a step's numbers, written over the loop's kept row `m` (the counts and extra fields are added
// by the loop): the routing fields are assigned over the previous step's, whose strings keep their capacity, so a
// steady-state step's row allocates nothing (docs/ops.md).
void fill_metrics_row(const StepStats& stats, StepMetrics& m) {
  m.step = stats.step + 1;
  m.loss = stats.loss;
  m.lr = stats.lr;
  m.grad_norm = stats.grad_norm;
  m.tokens_per_s = stats.tokens_per_s;
  m.flops_per_rank = stats.flops_per_rank;
  m.mfu = stats.mfu;
  m.step_ms = stats.step_ms;
  m.peak_bytes = stats.peak_bytes;
  m.counts.clear();
  m.extra.assign(stats.routing.begin(), stats.routing.end());
}

// The first row after a resume marks where the run resumed; after cleave run's restart, the restart's start-up,
// load and first step times.
void mark_first_row(StepMetrics& m, const StartPoint& start, double first_step_ms) {
  if (start.resumed) {
    m.counts.emplace_back("resumed_at_step", start.step);
    m.counts.emplace_back("config_changes", static_cast<std::int64_t>(start.changes.size()));
  }
  if (start.restart.number > 0) {
    m.counts.emplace_back("restart", start.restart.number);
    m.extra.emplace_back("restart_startup_s", start.began_unix_s - start.restart.launched_unix_s);
    m.extra.emplace_back("restart_load_s", start.load_s);
    m.extra.emplace_back("restart_first_step_s", first_step_ms * 1e-3);
  }
}

// More than train.skip_nonfinite_steps non-finite steps in a row stop the run.
void check_not_diverged(const StepStats& stats, std::int64_t nonfinite_in_a_row, std::int64_t allowed) {
  CLEAVE_CHECK(nonfinite_in_a_row <= allowed,
               "training diverged at step {}: loss is {}, gradient norm {} ({} non-finite step{} in a row, "
               "train.skip_nonfinite_steps is {}); {}. Lower optimizer.lr, check the data and the initial "
               "weights, or let the run skip such steps (train.skip_nonfinite_steps)",
               stats.step + 1, stats.loss, stats.grad_norm, nonfinite_in_a_row, nonfinite_in_a_row == 1 ? "" : "s",
               allowed,
               stats.skipped ? "its update was not applied (the weights are those the step began with)"
                             : "its update was applied (the gradient norm was finite)");
}

// The step loop from `start` to train.steps: each step's metrics row, evaluation and checkpoint cadence, the
// divergence check, the save-and-stop request; the run ends when its last checkpoint is committed.
TrainSummary run_steps(Trainer& trainer, Trainer::Impl& impl, const StartPoint& start, RunOutputs& out,
                       const std::string& checkpoints, const TrainOptions& options) {
  const auto& cfg = impl.setup.config;
  const bool reports = impl.setup.reports();
  std::int64_t nonfinite_in_a_row = 0;
  TrainSummary summary;
  // Every step's stats, listed once (no regrowth in the loop); the metrics row and its line are the run's output.
  summary.steps.reserve(static_cast<std::size_t>(std::max<std::int64_t>(cfg.train.steps - start.step, 0)));
  StepMetrics m;  // the row, refilled each step (fill_metrics_row)
  for (std::int64_t step = start.step; step < cfg.train.steps; ++step) {
    const StepStats stats = trainer.step(step);
    summary.steps.push_back(stats);
    summary.steps.back().routing = {};  // the trainer's, valid until its next step (StepStats::routing)
    if (impl.committed_in_step && reports) {
      out.interrupt();
      log::info("checkpoint: step {} committed; the step loop waited {:.1f} ms for it", impl.committed_in_step->first,
                impl.committed_in_step->second);
    }
    impl.committed_in_step.reset();
    fill_metrics_row(stats, m);
    const bool finite = std::isfinite(stats.loss) && std::isfinite(stats.grad_norm);
    nonfinite_in_a_row = finite ? 0 : nonfinite_in_a_row + 1;
    out.counts.nonfinite_steps += finite ? 0 : 1;
    out.counts.skipped_steps += stats.skipped ? 1 : 0;
    m.nonfinite_steps = out.counts.nonfinite_steps;
    m.skipped_steps = out.counts.skipped_steps;
    if (step == start.step) mark_first_row(m, start, stats.step_ms);
    // Evaluation every eval_interval steps and after the last one, on that step's metrics row.
    const bool last = step + 1 == cfg.train.steps;
    const bool eval_now =
        impl.eval_data && (last || (cfg.train.eval_interval > 0 && (step + 1) % cfg.train.eval_interval == 0));
    if (eval_now) {
      const EvalResult eval = trainer.evaluate(cfg.train.eval_batches);
      m.extra.emplace_back("eval_loss", eval.loss);
      m.extra.emplace_back("eval_accuracy", eval.accuracy);
      if (out.progress) out.progress->eval(step + 1, eval.loss, eval.accuracy);
      if (last) summary.eval = eval;
    }
    if (out.metrics) out.metrics->write(m);
    if (out.progress) out.progress->update(m);
    check_not_diverged(stats, nonfinite_in_a_row, cfg.train.skip_nonfinite_steps);
    const bool periodic = cfg.checkpoint.interval > 0 && (step + 1) % cfg.checkpoint.interval == 0;
    const bool save_now = periodic || (last && cfg.checkpoint.save_final);
    if (save_now) {
      out.interrupt();  // the checkpoint's log line gets a line of its own
      impl.save_in_train_loop(checkpoints, step + 1);
    }
    if (stats.stop_requested) {  // the preemption notice: save this step (unless just saved) and end
      out.interrupt();
      if (!save_now) impl.save_in_train_loop(checkpoints, step + 1);
      if (impl.pending_save) impl.commit_pending_save();
      if (reports) {
        log::info("stopped on request (SIGUSR1, the preemption notice) after step {}: checkpoint {} saved; "
                  "continue with --resume auto",
                  step + 1, (fs::path(checkpoints) / checkpoint::step_dir_name(step + 1)).string());
      }
      summary.stopped = true;
      break;
    }
    if (options.after_step) options.after_step(step + 1);
  }
  if (impl.pending_save) impl.commit_pending_save();  // the run ends when its last checkpoint is committed
  return summary;
}

// run.json (with the resume history) and, with more than one rank, every rank's peak on one log line. Rank 0.
void write_run_files(const Trainer::Impl& impl, const report::RunSummary& record, const StartPoint& start) {
  const auto& cfg = impl.setup.config;
  write_run_summary(with_resume(record, cfg.train.out_dir, start.resumed, start.step, start.from, start.changes),
                    cfg.train.out_dir);
  if (impl.setup.world.size() > 1) {
    std::string line;
    for (const auto& r : record.ranks) line += fmt::format("{}r{} {}", r.rank ? ", " : "", r.rank, format_bytes(r.peak_total));
    log::info("peak memory per rank: {}{}", line,
              cfg.device.memory_limit > 0 ? fmt::format(" (cap {})", format_bytes(cfg.device.memory_limit)) : "");
  }
}

}  // namespace

TrainSummary Trainer::train(const TrainOptions& options) {
  Impl& impl = *impl_;
  RankSetup& s = impl.setup;
  const auto& cfg = s.config;
  const std::string checkpoints = checkpoint_root();
  impl.throughput.peak = options.peak;
  check_output_paths(s, checkpoints, /*fresh=*/options.resume.empty(), options.save_on_signal);
  // --init-from with --resume (a fine-tune's own command line, as cleave run restarts it): the source's weights
  // start the run only when there is no checkpoint to continue; a resumed run's weights are its checkpoint's.
  const bool continuing = resume_continues_a_run(options.resume, checkpoints);
  if (options.init != nullptr && !continuing) load_weights(*options.init);
  if (options.init != nullptr && continuing) {
    impl.init_from = fmt::format("{}: {}", options.init->origin, describe_context(*options.init, cfg));
    if (s.reports()) {
      log::info("init: --init-from {} is not loaded: the run continues from its checkpoint (--resume {})",
                options.init->origin, options.resume);
    }
  }
  // Resume first: a checkpoint that cannot be loaded fails before anything is written.
  const StartPoint start = start_point(impl, options, checkpoints);
  TrainSummary summary;
  if (start.resumed && start.step == cfg.train.steps) {
    // A finished run resumed (or cleave run's restart after the final save): no step to run, and its run.json,
    // report and config.json are left as they are (rewriting them would put a 0-step run's numbers over its own).
    if (s.reports()) {
      log::info("resume: {} holds step {}, which is train.steps: the run is complete; nothing was run or written "
                "(raise train.steps to continue it)", start.from, start.step);
    }
    summary.completed = true;
    return summary;
  }
  RunOutputs out = open_run_outputs(s, options, start, impl.throughput, *impl.train_data);
  // Peak memory counts the model, not whatever earlier runs in this process left behind.
  s.allocator->reset_peak();

  try {
    summary = run_steps(*this, impl, start, out, checkpoints, options);
  } catch (const std::exception&) {
    impl.pending_save.reset();  // joins its writer; an error it never reported is logged
    // A run that fails (diverges, loses its disk, a peer's error) still gets its page, of the steps it finished,
    // on world rank 0 (the only rank with a metrics writer). Ranks ended by the watchdog or the launcher get none.
    if (out.metrics && cfg.train.report) {
      out.interrupt();
      write_report_page(cfg.train.out_dir, " (of the steps before the failure)");
    }
    throw;
  }
  if (cfg.train.trace) write_measured_trace(s, impl.last_timeline, cfg.train.out_dir);
  summary.peak_bytes = summary.steps.empty() ? 0 : summary.steps.back().peak_bytes;
  // Every rank's own peak (the memory a layout needs per device) by category, with its coordinates: run.json
  // for the report, and the per-rank totals on one line.
  report::RunSummary record = gather_run_summary(s);
  record.model_flops_per_step = impl.throughput.model_flops_per_step;
  record.peak_flops_per_rank = impl.throughput.peak.per_rank;
  record.peak_source = impl.throughput.peak.source;
  record.init_from = impl.init_from;
  if (s.reports()) write_run_files(impl, record, start);
  if (out.progress) out.progress->summary(cfg.train.out_dir);
  if (s.reports() && cfg.train.report) write_report_page(cfg.train.out_dir, "");
  summary.completed = true;
  return summary;
}

}  // namespace cleave::train
