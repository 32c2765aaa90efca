// The supervisor's loop (supervisor.hpp): the first layout checked before anything starts (layout_choice.hpp), then
// attempt after attempt (attempt.hpp) until one completes, stops on SIGTERM, or a failure leaves no restart
// (recovery_policy.hpp decides; layout_choice.hpp picks the next layout; restart_checkpoint.hpp the checkpoint it
// continues from; restart_record.hpp records).
// Invariant: every end of the loop has saved supervisor.json first.
#include "engine/supervise/supervisor.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "engine/config/config.hpp"
#include "engine/core/english.hpp"
#include "engine/core/error.hpp"
#include "engine/core/exit_code.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/core/output_path.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/supervise/attempt.hpp"
#include "engine/supervise/health_check.hpp"
#include "engine/supervise/layout_choice.hpp"
#include "engine/supervise/restart_checkpoint.hpp"
#include "engine/supervise/restart_record.hpp"
#include "engine/train/checkpoint/config_change.hpp"
#include "engine/train/checkpoint/resume_fallback.hpp"
#include "engine/train/checkpoint/weight_source.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/stop_request.hpp"

namespace cleave::supervise {
namespace {

namespace fs = std::filesystem;

// SIGTERM to `cleave run` (a preemption notice): static by necessity, a handler reaches nothing else. The loop
// forwards it to the ranks as SIGUSR1 (engine/train/stop_request.hpp) and ends once they have saved.
std::atomic<bool> g_sigterm{false};
void on_sigterm(int) { g_sigterm.store(true); }

double mtime_unix(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

std::string slot_name(const Slot& s) { return fmt::format("{}:{}", s.host, s.index); }

// supervisor/, or supervisor.2, .3 ... when an earlier supervised run of this directory left one.
std::string fresh_dir(const std::string& out_dir) {
  fs::path dir = fs::path(out_dir) / "supervisor";
  for (int n = 2; fs::exists(dir); ++n) dir = fs::path(out_dir) / fmt::format("supervisor.{}", n);
  fs::create_directories(dir);
  return dir.string();
}

// The first attempt's layout, and every input a later attempt reads, checked before anything starts.
planner::PlanChoice first_choice(const SuperviseOptions& o, const config::RunConfig& base) {
  planner::PlanChoice choice = config_layout(o, base);
  check_launcher(o);
  check_replan_inputs(o, base, choice.world());
  return choice;
}

// The log lines of a run that completed: where the records are, and what each restart cost.
void log_completion(const SupervisorRecord& record, const std::string& dir) {
  log::info("run: completed after {} restart{}; records in {} and run.json", record.restarts.size(),
            record.restarts.size() == 1 ? "" : "s", (fs::path(dir) / "supervisor.json").string());
  for (const RestartRecord& r : record.restarts) {
    log::info("run: restart {}: {}; {} -> {}; {} step{} redone; lost {:.2f} s (detection {:.2f}, teardown {:.2f}, "
              "start-up {:.2f}, load {:.2f}, first step {:.2f}, redone work {:.2f})",
              r.number, r.why, r.old_layout, r.new_layout, r.steps_redone, r.steps_redone == 1 ? "" : "s",
              r.seconds_lost(), r.detection_s, r.teardown_s, r.startup_s.value_or(0), r.load_s.value_or(0),
              r.first_step_s.value_or(0), r.redone_s);
  }
}

// Where the run's files are.
struct RunPaths {
  std::string out_dir;       // train.out_dir
  std::string ckpt_root;     // where the checkpoints are
  std::string dir;           // this supervisor's records: supervisor/ (or supervisor.N)
  std::string metrics_path;  // out_dir/metrics.jsonl
};

void save_record(const RunPaths& paths, const SupervisorRecord& record) {
  replace_file((fs::path(paths.dir) / "supervisor.json").string(), supervisor_json_text(record));
}

// What the user does about a checkpoint no restart can use, before running the same command again.
std::string_view cure_of(FailureKind kind) {
  return kind == FailureKind::kCheckpointMismatch ? "make the config fit the checkpoint as the message says"
                                                   : "restore a damaged checkpoint's files";
}

// How to run again once the job's refused command line or config is fixed: from the newest checkpoint when there is
// one, else a fresh start (with --resume auto where train.out_dir already holds the run's files, which a fresh start
// of cleave run refuses).
std::string after_bad_input(const RunPaths& paths) {
  if (const auto latest = restart_checkpoint(paths.ckpt_root).checkpoint) {
    return fmt::format("continue from {} with the same cleave run command and --resume auto after the --", *latest);
  }
  const bool holds_run = fs::exists(fs::path(paths.out_dir) / "metrics.jsonl") ||
                         fs::exists(fs::path(paths.out_dir) / "config.json");
  return holds_run ? "run the same cleave run command with --resume auto after the -- (no checkpoint was written)"
                   : "run the same cleave run command again (no checkpoint was written)";
}

// A failure no restart cures (recovery_policy.hpp: restart_can_cure): the job ends now, the budget unspent, with
// the trainer's own line (it names each checkpoint and what is wrong, each key refused and how to set it back, or
// the bad option or key and the nearest valid one) and what to do; the exit code is the trainer's own for that kind
// (give_up_exit_status: 64, 66, 78). Bad input is the job refusing its own command line or config before any work
// (`job_exit`: the job's exit code, 64 unless the launcher refused it): nothing crashed and nothing is recovered, so
// the line says that and how to run again, not where the checkpoints are; the job's error (and the attempt's line,
// note_failed_attempt's) already stands above it, so it is not repeated.
int give_up_at_once(const SuperviseOptions& o, const RunPaths& paths, const Failure& failure, int job_exit,
                    SupervisorRecord& record) {
  const std::string why = fmt::format("{}: {}", failure_kind_name(failure.kind), failure.why);
  record.outcome = "failed: " + why;
  save_record(paths, record);
  const std::string spent = fmt::format("{} of --max-restarts {} restarts made, the rest not spent",
                                        record.restarts.size(), o.max_restarts);
  if (failure.kind == FailureKind::kBadInput) {
    const std::string code = job_exit == exit_status(ExitCode::kBadInput) ? fmt::format(", exit {}", job_exit) : "";
    log::error("run: giving up at once, a restart cannot cure this ({}): the job refused its command line or config "
               "before any work (bad input{}; its error above says what to change); once that is changed, {}",
               spent, code, after_bad_input(paths));
  } else {
    log::error("run: giving up at once, a restart cannot cure this ({}): {}; nothing was renamed or deleted under {} "
               "({} and run the same command with --resume auto after the --, or start a fresh run in another "
               "train.out_dir)",
               spent, why, paths.ckpt_root, cure_of(failure.kind));
  }
  return give_up_exit_status(failure.kind);
}

// What one attempt leaves to the next.
struct LoopState {
  SupervisorRecord record;
  planner::PlanChoice choice;               // the next attempt's layout
  std::vector<Slot> slots;                  // the slots left
  std::vector<std::string> extra;           // overrides of the restarts: the layout, the checkpoint interval
  std::optional<std::string> restart_file;  // the next attempt's --restart-record
};

// A failed attempt as the restart sees it: what failed, the steps its metrics.jsonl holds, and when.
struct FailedAttempt {
  Failure failure;
  MetricsRows rows;
  double fault_at = 0;     // when the fault happened, as well as the records tell (unix seconds)
  double detected_at = 0;  // when the supervisor saw it
  double ended_at = 0;     // when the last process of the job was gone
};

// When the supervisor saw the failure of `run`: the failure line's moment, else (no line, a non-zero exit) its end.
double detection_time(const AttemptRun& run) {
  return run.detected_at == 0 && run.exit_code != 0 ? run.ended_at : run.detected_at;
}

// Records the failed attempt `a`: its metrics.jsonl kept as supervisor/attempt_N.metrics.jsonl, its outcome in
// `record`, a log line.
FailedAttempt note_failed_attempt(const RunPaths& paths, const AttemptRun& run, AttemptRecord a,
                                  SupervisorRecord& record) {
  FailedAttempt f;
  f.failure = classify_failure(run.output, run.exit_code);
  f.detected_at = detection_time(run);
  f.ended_at = a.ended_unix_s;
  const std::string& metrics_path = paths.metrics_path;
  f.rows = read_metrics_rows(metrics_path);
  if (fs::exists(metrics_path)) {
    fs::copy_file(metrics_path, fs::path(paths.dir) / fmt::format("attempt_{}.metrics.jsonl", a.number),
                  fs::copy_options::overwrite_existing);
  }
  f.fault_at = run.fault_at;
  if (f.fault_at == 0) {
    f.fault_at = std::min(f.detected_at, mtime_unix(metrics_path) > 0 ? mtime_unix(metrics_path) : f.detected_at);
  }
  a.outcome = fmt::format("failed: {}", f.failure.why);
  record.attempts.push_back(a);
  log::warn("run: attempt {} failed after step {}: {} ({})", a.number, f.rows.last_step, f.failure.why,
            failure_kind_name(f.failure.kind));
  return f;
}

// What a refused restart leaves and how to continue: the checkpoint, the metrics rows, the command.
std::string keep_note(const std::optional<std::string>& latest, const MetricsRows& rows, const RunPaths& paths) {
  return fmt::format(
      "nothing is lost: the newest intact checkpoint is {} and metrics.jsonl holds {} (each attempt's rows and log "
      "are kept in {}); continue with the same cleave run command and --resume auto after the --",
      latest.value_or("(none: no checkpoint was written yet)"),
      rows.last_step > 0 ? fmt::format("steps 1..{}", rows.last_step) : std::string("no step yet"), paths.dir);
}

// A restart refused (`why`: the budget, too few ranks, no layout): the record and the log say so; the exit code.
int give_up(const RunPaths& paths, const std::string& why, const std::string& note, SupervisorRecord& record) {
  record.outcome = "failed: " + why;
  save_record(paths, record);
  log::error("run: giving up: {}; {}", why, note);
  return 1;
}

// The restart's record before its layout is chosen: what failed, the slots dropped (those of `state.slots` not in
// `left`), the layout that ran, and the work lost since the checkpoint `latest`.
RestartRecord restart_record(const FailedAttempt& f, const LoopState& state, const std::vector<Slot>& left,
                             const std::optional<std::string>& latest) {
  RestartRecord r;
  r.number = static_cast<int>(state.record.restarts.size()) + 1;
  r.at_unix_s = f.detected_at;
  r.failed_ranks = f.failure.ranks;
  r.kind = std::string(failure_kind_name(f.failure.kind));
  r.why = f.failure.why;
  for (const Slot& s : state.slots) {
    if (std::find(left.begin(), left.end(), s) == left.end()) r.dropped_slots.push_back(slot_name(s));
  }
  r.old_layout = describe(state.choice);
  r.old_world = state.choice.world();
  const std::int64_t ckpt_step = checkpoint_step(latest);
  r.checkpoint = latest.value_or("");
  r.resumed_at_step = ckpt_step;
  r.last_step_done = f.rows.last_step;
  r.steps_redone = std::max<std::int64_t>(0, f.rows.last_step - ckpt_step);
  r.redone_s = f.rows.ms_after(ckpt_step) * 1e-3;
  r.detection_s = std::max(0.0, f.detected_at - f.fault_at);
  r.teardown_s = std::max(0.0, f.ended_at - f.detected_at);
  return r;
}

// The log lines of restart `r` (`last_step`: the steps the failed attempt had done).
void log_restart(const SuperviseOptions& o, const RunPaths& paths, const RestartRecord& r, std::int64_t last_step) {
  if (r.checkpoint.empty()) {
    log::warn("run: no checkpoint yet under {}: restarting from step 0 ({} step{} done so far are redone)",
              paths.ckpt_root, last_step, last_step == 1 ? "" : "s");
  }
  log::info("run: restart {} of at most {}: {} -> {} ({}); from {} ({} step{} redone, {:.2f} s of work); detection "
            "{:.2f} s, teardown {:.2f} s",
            r.number, o.max_restarts, r.old_layout, r.new_layout, r.layout_choice,
            r.checkpoint.empty() ? std::string("step 0 (no checkpoint yet)") : r.checkpoint, r.steps_redone,
            r.steps_redone == 1 ? "" : "s", r.redone_s, r.detection_s, r.teardown_s);
}

// Sets `state` up for the restart on the slots `left` with layout `next`: the layout's overrides, and under
// --max-lost-seconds the checkpoint interval the step time of `rows` asks for.
void set_up_restart(const SuperviseOptions& o, const planner::PlanChoice& next, std::vector<Slot> left,
                    const MetricsRows& rows, LoopState& state) {
  state.choice = next;
  state.slots = std::move(left);
  state.extra = state.choice.overrides();
  if (o.max_lost_seconds > 0 && rows.mean_step_s() > 0) {
    const std::int64_t interval = checkpoint_interval_for(o.max_lost_seconds, rows.mean_step_s());
    state.extra.push_back(fmt::format("checkpoint.interval={}", interval));
    log::info("run: checkpoint.interval {} (--max-lost-seconds {} at {:.3f} s per step)", interval,
              o.max_lost_seconds, rows.mean_step_s());
  }
}

// After attempt `a` failed (its run `run`): records the failure, then either sets `state` up for the restart
// (nullopt) or gives up, leaving the newest checkpoint as it is (the exit code).
std::optional<int> after_failure(const SuperviseOptions& o, const RunPaths& paths, LayoutPlanner& planner,
                                 const AttemptRun& run, AttemptRecord a, LoopState& state) {
  SupervisorRecord& record = state.record;
  const FailedAttempt failed = note_failed_attempt(paths, run, std::move(a), record);
  if (!restart_can_cure(failed.failure.kind)) return give_up_at_once(o, paths, failed.failure, run.exit_code, record);

  const std::vector<bool> healthy = check_health(o.health_check, state.slots);
  // The checkpoint as the restart will find it: looked at after everything else that runs before it.
  const RestartFrom from = restart_checkpoint(paths.ckpt_root);
  if (from.no_intact) {  // the restart would stop at its load: stop now, with its message
    return give_up_at_once(o, paths, {FailureKind::kNoIntactCheckpoint, {}, *from.no_intact}, run.exit_code, record);
  }
  std::vector<Slot> left = remaining_slots(state.slots, failed.failure, healthy);
  const std::string note = keep_note(from.checkpoint, failed.rows, paths);
  const RestartDecision decision =
      decide_restart(static_cast<int>(record.restarts.size()), o.max_restarts, static_cast<int>(left.size()), o.min_ranks);
  if (!decision.restart) return give_up(paths, decision.reason, note, record);

  RestartRecord r = restart_record(failed, state, left, from.checkpoint);
  const NextLayout next = next_layout(o, planner, state.choice, static_cast<int>(left.size()));
  if (!next.choice) return give_up(paths, next.note, note, record);
  r.layout_choice = next.note;
  r.new_layout = describe(*next.choice);
  r.new_world = next.choice->world();
  log_restart(o, paths, r, failed.rows.last_step);
  record.restarts.push_back(r);
  save_record(paths, record);
  set_up_restart(o, *next.choice, std::move(left), failed.rows, state);
  state.restart_file = (fs::path(paths.dir) / fmt::format("restart_{}.json", r.number)).string();
  return std::nullopt;
}

// Every value of `flag` among the train options ("FLAG VALUE" or "FLAG=VALUE"), in order.
std::vector<std::string> flag_values(const std::vector<std::string>& train_args, const std::string& flag) {
  std::vector<std::string> values;
  for (std::size_t i = 0; i < train_args.size(); ++i) {
    if (train_args[i] == flag && i + 1 < train_args.size()) values.push_back(train_args[i + 1]);
    else if (train_args[i].starts_with(flag + "=")) values.push_back(train_args[i].substr(flag.size() + 1));
  }
  return values;
}

// The keys of every --allow-config-change among the train options ("--allow-config-change K[,K]" or "...=K[,K]").
std::vector<std::string> allowed_changes(const std::vector<std::string>& train_args) {
  std::vector<std::string> keys;
  for (const std::string& list : flag_values(train_args, "--allow-config-change")) {
    for (std::string& key : train::split_key_list(list)) keys.push_back(std::move(key));
  }
  return keys;
}

// The value of --init-from among the train options (the last one given); empty when absent.
std::string init_from_arg(const std::vector<std::string>& train_args) {
  const std::vector<std::string> dirs = flag_values(train_args, "--init-from");
  return dirs.empty() ? std::string() : dirs.back();
}

// The config the trainer will run: with --init-from, the model keys come from the weights as `cleave train` takes
// them (config_for_init; only the source's config is read here, not its tensors), so the first check and every
// re-plan see the model the job trains, not the default one.
config::RunConfig run_config(const SuperviseOptions& o) {
  const std::string init_from = init_from_arg(o.train_args);
  if (init_from.empty()) return config::load_config(o.config_path, o.overrides);
  return train::config_for_init(o.config_path, o.overrides, train::open_weight_source_model(init_from));
}

// The options the planner reads the config from (planner::choice_of_config and search_plans read a config file and
// --set values): with --init-from, base's model section (the weights' keys config_for_init filled in) follows the
// user's --set values, type first, so the first check and every re-plan see the model the job trains. The jobs
// themselves are launched with the user's own command line.
SuperviseOptions planning_options(const SuperviseOptions& o, const config::RunConfig& base) {
  SuperviseOptions planning = o;
  if (init_from_arg(o.train_args).empty()) return planning;
  const nlohmann::json model = nlohmann::json::parse(config::to_json(base)).at("model");
  planning.overrides.push_back("model.type=" + model.at("type").dump());
  for (const auto& [key, value] : model.items()) {
    if (key != "type") planning.overrides.push_back(fmt::format("model.{}={}", key, value.dump()));
  }
  return planning;
}

// Bad input, found before any job starts, as the trainer would stop each attempt (ExitCode::kBadInput): an unknown
// --allow-config-change key, a missing or unreadable data file, a --resume PATH holding no checkpoint, a train.out_dir
// that is a file, cannot be made or already holds a run without --resume, fewer slots than --min-ranks.
void check_fresh_start(const SuperviseOptions& o, const config::RunConfig& base) {
  train::check_data_files(base);  // a missing data file would fail every attempt
  train::check_resume_argument(o.resume);  // a --resume PATH that holds no checkpoint would fail every attempt
  train::check_allowed_keys(allowed_changes(o.train_args), nlohmann::json::parse(config::to_json(base)));
  const std::string& out_dir = base.train.out_dir;
  // A file there, or a directory that cannot be made: the supervisor makes it next (a filesystem error, exit 1).
  check_output_dir("train.out_dir", out_dir);
  CLEAVE_CHECK_INPUT(!o.resume.empty() ||
                         !(fs::exists(fs::path(out_dir) / "metrics.jsonl") || fs::exists(fs::path(out_dir) / "config.json")),
                     "run: train.out_dir {} already holds a run; nothing was started. Continue it with --resume auto "
                     "after the --, or give another --set train.out_dir=...",
                     out_dir);
  CLEAVE_CHECK_INPUT(static_cast<int>(o.slots.size()) >= o.min_ranks, "run: {} {} fewer than --min-ranks {}",
                     count_of(static_cast<std::int64_t>(o.slots.size()), "slot"), o.slots.size() == 1 ? "is" : "are",
                     o.min_ranks);
}

// The run's paths; creates train.out_dir and this supervisor's own records directory.
RunPaths make_run_paths(const config::RunConfig& base) {
  const std::string out_dir = base.train.out_dir;
  const std::string ckpt_root =
      base.checkpoint.dir.empty() ? (fs::path(out_dir) / "checkpoints").string() : base.checkpoint.dir;
  fs::create_directories(out_dir);
  return RunPaths{out_dir, ckpt_root, fresh_dir(out_dir), (fs::path(out_dir) / "metrics.jsonl").string()};
}

void catch_sigterm() {
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
}

// One attempt, number `attempt`, as `state` sets it up: started, watched to its end, and its record so far.
struct Attempt {
  AttemptRecord record;
  AttemptRun run;
};
Attempt run_attempt(const SuperviseOptions& o, const RunPaths& paths, int attempt, LoopState& state) {
  const int world = state.choice.world();
  const std::vector<Slot> used(state.slots.begin(), state.slots.begin() + world);
  const JobSpec spec = attempt_job(o, paths.dir, used, state.extra, attempt, state.restart_file);
  AttemptRecord a;
  a.number = attempt;
  a.world = world;
  a.layout = describe(state.choice);
  a.command = spec.argv;
  a.log = spec.log_path;
  a.started_unix_s = unix_now();
  SupervisorRecord& record = state.record;
  if (!record.restarts.empty()) {
    replace_file(*state.restart_file, fmt::format("{{\"restart\": {}, \"launched_unix_s\": {:.6f}}}\n",
                                                  record.restarts.back().number, a.started_unix_s));
  }
  log::info("run: attempt {} on {} rank{} ({}): {}", attempt, world, world == 1 ? "" : "s", a.layout,
            fmt::join(spec.argv, " "));
  AttemptRun run = watch_job(spec, o.teardown_grace_s, g_sigterm);
  a.ended_unix_s = run.ended_at;
  a.exit_code = run.exit_code;
  if (!record.restarts.empty()) {
    fill_phase_times(record.restarts.back(), paths.metrics_path);
    follow_fallback(record.restarts.back(), paths.ckpt_root, paths.dir, paths.metrics_path);
  }
  return {std::move(a), std::move(run)};
}

// The job completed: the records and the log say so; the exit code (0).
int finish_completed(const RunPaths& paths, AttemptRecord a, SupervisorRecord& record) {
  a.outcome = "completed";
  record.attempts.push_back(a);
  record.outcome = "completed";
  save_record(paths, record);
  merge_restarts_into_run_json((fs::path(paths.out_dir) / "run.json").string(), record);
  log_completion(record, paths.dir);
  return 0;
}

// The job ended after a forwarded SIGTERM: the records and the log say where to continue; the exit code
// (train::kStoppedExitCode when the ranks saved and stopped, else 1).
int finish_stopped(const RunPaths& paths, AttemptRecord a, int exit_code, SupervisorRecord& record) {
  const auto latest = restart_checkpoint(paths.ckpt_root).checkpoint;
  a.outcome = fmt::format("stopped on SIGTERM (exit {})", exit_code);
  record.attempts.push_back(a);
  record.outcome = a.outcome;
  save_record(paths, record);
  log::info("run: stopped on SIGTERM; newest intact checkpoint: {}; continue with the same command and "
            "--resume auto after the --", latest.value_or("(none)"));
  return exit_code == 0 ? train::kStoppedExitCode : 1;
}

}  // namespace

int supervise(const SuperviseOptions& o) {
  const config::RunConfig base = run_config(o);
  check_fresh_start(o, base);
  LoopState state;
  const SuperviseOptions planning = planning_options(o, base);
  state.choice = first_choice(planning, base);
  const RunPaths paths = make_run_paths(base);
  LayoutPlanner planner(planning, base, paths.dir);
  catch_sigterm();

  state.record.slots = o.slots;
  state.record.outcome = "running";
  state.slots = o.slots;
  for (int attempt = 1;; ++attempt) {
    Attempt now = run_attempt(o, paths, attempt, state);
    const AttemptRun& run = now.run;
    const bool stopped = run.forwarded && run.output.find("stopped on request (SIGUSR1") != std::string::npos;
    if (run.exit_code == 0 && !stopped) return finish_completed(paths, std::move(now.record), state.record);
    if (run.forwarded) return finish_stopped(paths, std::move(now.record), run.exit_code, state.record);
    if (const std::optional<int> code = after_failure(o, paths, planner, run, std::move(now.record), state)) {
      return *code;
    }
  }
}

}  // namespace cleave::supervise
