// The supervisor's loop (supervisor.hpp): the first layout checked before anything starts, then attempt after
// attempt (attempt.hpp) until one completes, stops on SIGTERM, or a failure leaves no restart (recovery_policy.hpp
// decides; restart_record.hpp records). Invariant: every end of the loop has saved supervisor.json first.
#include "engine/supervise/supervisor.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/checkpoint/quick_check.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/supervise/attempt.hpp"
#include "engine/supervise/restart_record.hpp"
#include "engine/train/config_change.hpp"
#include "engine/train/data/make_data_source.hpp"
#include "engine/train/stop_request.hpp"
#include "engine/train/weight_source.hpp"

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

std::string describe(const planner::PlanChoice& c) {
  return fmt::format("{}, micro {} x accum {}, {}{}", c.layout(), c.micro_batch,
                     c.global_batch / (c.micro_batch * c.dp), c.pp > 1 ? c.schedule : std::string("single stage"),
                     c.zero_stage > 0 ? fmt::format(", ZeRO-{}", c.zero_stage) : std::string());
}

std::string slot_name(const Slot& s) { return fmt::format("{}:{}", s.host, s.index); }

// The planner's best plan on `world` ranks (nullopt: none fits), with the reason line for the log.
struct PlannerPick {
  std::optional<planner::PlanChoice> choice;
  std::string note;
};

class Planner {
 public:
  Planner(const SuperviseOptions& o, const config::RunConfig& base, std::string dir) : o_(o), base_(base), dir_(std::move(dir)) {}

  PlannerPick best(int world) {
    const std::string profile = profile_path(world);
    const auto setup = planner::planning_setup(base_, profile, o_.memory_limit, world);
    planner::SearchResult result;
    try {
      result = planner::search_plans(o_.config_path, o_.overrides, setup.profile, setup.options);
    } catch (const Error& e) {  // a world no layout divides
      return {std::nullopt, e.what()};
    }
    if (result.ranked.empty()) {
      return {std::nullopt, fmt::format("no plan on {} ranks fits the memory cap {}", world,
                                        result.memory_limit > 0 ? format_bytes(result.memory_limit) : "(none)")};
    }
    const auto& best = result.ranked.front();
    return {best.choice, fmt::format("the planner's best of {} plans under the cap {} (predicted {:.1f} ms/step, peak {})",
                                     result.ranked.size(),
                                     result.memory_limit > 0 ? format_bytes(result.memory_limit) : "(none)",
                                     best.step_s * 1e3, format_bytes(best.peak_bytes))};
  }

 private:
  // --profile, else this machine measured once for the model and kept as supervisor/profile.json.
  std::string profile_path(int world) {
    if (!o_.profile.empty()) return o_.profile;
    const std::string path = (fs::path(dir_) / "profile.json").string();
    if (!fs::exists(path)) {
      log::info("run: measuring this machine for the planner (once; kept as {}; --profile FILE skips this)", path);
      // As `cleave plan` without --profile measures it: no memory cap of its own ("device_memory_GiB": "none"),
      // which the profile reader takes back as it was written.
      const auto profile = planner::measure_this_machine(run_plan::model_spec(base_.model), world);
      replace_file(path, planner::profile_to_json(profile).dump(2) + "\n");
    }
    return path;
  }

  const SuperviseOptions& o_;
  const config::RunConfig& base_;
  std::string dir_;
};

// supervisor/, or supervisor.2, .3 ... when an earlier supervised run of this directory left one.
std::string fresh_dir(const std::string& out_dir) {
  fs::path dir = fs::path(out_dir) / "supervisor";
  for (int n = 2; fs::exists(dir); ++n) dir = fs::path(out_dir) / fmt::format("supervisor.{}", n);
  fs::create_directories(dir);
  return dir.string();
}

// The re-plan's inputs, checked before the first attempt starts: read only at the first failure, a bad --profile or
// --memory-limit would end the job hours in, exactly when the re-plan is needed. Under --keep-layout nothing
// re-plans, so either would be accepted and do nothing: refused.
void check_replan_inputs(const SuperviseOptions& o, const config::RunConfig& base, int world) {
  if (o.keep_layout) {
    CLEAVE_CHECK(o.profile.empty() && o.memory_limit.empty(),
                 "run: {} prices the planner's re-plan, but --keep-layout keeps tp x cp x pp and never re-plans; "
                 "nothing was started (drop {} or --keep-layout)", o.profile.empty() ? "--memory-limit" : "--profile",
                 o.profile.empty() ? "--memory-limit" : "--profile");
    return;
  }
  try {
    if (!o.profile.empty()) static_cast<void>(planner::planning_setup(base, o.profile, o.memory_limit, world));
    else if (!o.memory_limit.empty()) static_cast<void>(parse_bytes(o.memory_limit, "--memory-limit"));
  } catch (const Error& e) {
    CLEAVE_THROW("run: {}; nothing was started (the re-plan after a failure reads --profile and --memory-limit)",
                 e.what());
  }
}

std::vector<bool> check_health(const std::string& command, const std::vector<Slot>& slots) {
  std::vector<bool> healthy(slots.size(), true);
  if (command.empty()) return healthy;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const std::string line = fmt::format("CLEAVE_SLOT_HOST='{}' CLEAVE_SLOT_INDEX={} sh -c '{}' > /dev/null 2>&1",
                                         slots[i].host, slots[i].index, command);
    healthy[i] = std::system(line.c_str()) == 0;
    if (!healthy[i]) log::warn("run: health check failed on slot {} ({}); the slot is dropped", slot_name(slots[i]), command);
  }
  return healthy;
}


// The config's own layout on the slots given, checked before anything starts.
planner::PlanChoice first_choice(const SuperviseOptions& o, const config::RunConfig& base) {
  planner::PlanChoice choice;
  try {
    // A config that fixes dp uses tp x cp x dp x pp of the slots (the rest idle); dp -1 fills them.
    const auto& p = base.parallel;
    const int world = p.data_parallel_size > 0
                          ? p.tensor_model_parallel_size * p.context_parallel_size * p.pipeline_model_parallel_size *
                                p.data_parallel_size
                          : static_cast<int>(o.slots.size());
    choice = planner::choice_of_config(o.config_path, o.overrides, world);
    static_cast<void>(choice.apply_to(base));  // the config's own checks at this world, before anything starts
  } catch (const std::exception& e) {
    CLEAVE_THROW("run: the config does not run on the {} slots given: {}; nothing was started (set parallel.* "
                 "after the -- or give other --slots)",
                 o.slots.size(), e.what());
  }
  const int first_world = choice.world();
  CLEAVE_CHECK(first_world <= static_cast<int>(o.slots.size()),
               "run: the config's layout {} needs {} ranks but only {} slots are given", choice.layout(), first_world,
               o.slots.size());
  check_launcher(o);
  check_replan_inputs(o, base, first_world);
  return choice;
}

// The layout for the `n` ranks left after a failure: --keep-layout's (tp x cp x pp and ep kept, dp shrunk), or the
// planner's
// best. `note` is the record's layout_choice, or without a layout the reason the supervisor gives up.
struct NextLayout {
  std::optional<planner::PlanChoice> choice;
  std::string note;
};

NextLayout next_layout(const SuperviseOptions& o, Planner& planner, const planner::PlanChoice& choice, int n) {
  if (o.keep_layout) {
    std::optional<planner::PlanChoice> next = keep_layout(choice, n);
    if (!next) {
      const int kept = choice.tp * choice.cp * choice.pp;
      return {std::nullopt, fmt::format("--keep-layout keeps tp x cp x pp = {} x {} x {} = {} ranks (and ep {}), "
                                        "but {} rank{} left (the smallest world for this layout is {})",
                                        choice.tp, choice.cp, choice.pp, kept, choice.ep, n, n == 1 ? " is" : "s are",
                                        kept * choice.ep / std::gcd(choice.cp, choice.ep))};
    }
    return {next, "kept tp x cp x pp (--keep-layout), dp shrunk"};
  }
  PlannerPick pick = planner.best(n);
  if (!pick.choice) {
    const int original = static_cast<int>(o.slots.size());
    const auto smallest = smallest_world(n + 1, std::max(2 * original, n + 1), [&](int w) {
      return planner.best(w).choice.has_value();
    });
    return {std::nullopt, fmt::format("no layout fits at the {} rank{} left ({}); {}", n, n == 1 ? "" : "s", pick.note,
                                      smallest ? fmt::format("the smallest world that fits is {} ranks", *smallest)
                                               : fmt::format("no world up to {} ranks fits either", 2 * original))};
  }
  return {pick.choice, pick.note};
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

// The checkpoint a restart's --resume auto continues from: the newest that passes the quick check (index.json and
// the files' headers; engine/checkpoint/quick_check.hpp). One the trainer would skip is named once, with why. When
// there are checkpoints and the quick check finds every one damaged, `no_intact` is the trainer's own
// NoIntactCheckpoint message: the restart would stop with it at its load.
struct RestartFrom {
  std::optional<std::string> checkpoint;
  std::optional<std::string> no_intact;
};

RestartFrom restart_checkpoint(const std::string& root) {
  const std::vector<checkpoint::ResumeCandidate> candidates = checkpoint::quick_check_candidates(root);
  RestartFrom out;
  for (const checkpoint::ResumeCandidate& c : candidates) {
    if (c.state == checkpoint::CandidateState::kIntact) out.checkpoint = (fs::path(root) / c.name).string();
  }
  if (!out.checkpoint) {
    out.no_intact = checkpoint::no_intact_checkpoint_message("auto", root, candidates);
    return out;
  }
  const auto newest = checkpoint::latest_step_dir(root);
  if (newest && newest != out.checkpoint) {
    log::warn("run: the newest checkpoint {} is damaged ({}); the restart falls back to {}", *newest,
              checkpoint::quick_check(*newest).value_or("?"), *out.checkpoint);
  }
  return out;
}

void save_record(const RunPaths& paths, const SupervisorRecord& record) {
  replace_file((fs::path(paths.dir) / "supervisor.json").string(), supervisor_json_text(record));
}

// A restart whose job resumed from an older checkpoint than the record states (the trainer found damage the quick
// check cannot see, and fell back): the record follows the job (checkpoint, step, steps redone and their time, from
// the failed attempt's rows kept in supervisor/attempt_N.metrics.jsonl), and the log says so once.
void follow_fallback(RestartRecord& r, const RunPaths& paths) {
  const std::optional<std::int64_t> step = resumed_elsewhere(r, paths.metrics_path);
  if (!step) return;
  log::warn("run: restart {} resumed from step {}, not {}: the trainer skipped a damaged checkpoint (its log says "
            "which and why)", r.number, *step, r.resumed_at_step);
  r.checkpoint = (fs::path(paths.ckpt_root) / checkpoint::step_dir_name(*step)).string();
  r.resumed_at_step = *step;
  r.steps_redone = std::max<std::int64_t>(0, r.last_step_done - *step);
  const std::string rows = (fs::path(paths.dir) / fmt::format("attempt_{}.metrics.jsonl", r.number)).string();
  r.redone_s = read_metrics_rows(rows).ms_after(*step) * 1e-3;
}

// What the user does about a failure no restart cures, before running the same command again.
std::string_view cure_of(FailureKind kind) {
  switch (kind) {
    case FailureKind::kCheckpointMismatch: return "make the config fit the checkpoint as the message says";
    case FailureKind::kBadInput: return "fix the command line or the config as the message says";
    default: return "restore a damaged checkpoint's files";
  }
}

// A failure no restart cures (recovery_policy.hpp: restart_can_cure): the job ends now, the budget unspent, with
// the trainer's own line (it names each checkpoint and what is wrong, each key refused and how to set it back, or
// the bad option or key and the nearest valid one) and what to do.
int give_up_at_once(const SuperviseOptions& o, const RunPaths& paths, const Failure& failure, SupervisorRecord& record) {
  const std::string why = fmt::format("{}: {}", failure_kind_name(failure.kind), failure.why);
  record.outcome = "failed: " + why;
  save_record(paths, record);
  const std::string_view cure = cure_of(failure.kind);
  log::error("run: giving up at once, a restart cannot cure this ({} of --max-restarts {} restarts made, the rest "
             "not spent): {}; nothing was renamed or deleted under {} ({} and run the same command with --resume "
             "auto after the --, or start a fresh run in another train.out_dir)",
             record.restarts.size(), o.max_restarts, why, paths.ckpt_root, cure);
  return 1;
}

// What one attempt leaves to the next.
struct LoopState {
  SupervisorRecord record;
  planner::PlanChoice choice;               // the next attempt's layout
  std::vector<Slot> slots;                  // the slots left
  std::vector<std::string> extra;           // overrides of the restarts: the layout, the checkpoint interval
  std::optional<std::string> restart_file;  // the next attempt's --restart-record
};

// After attempt `a` failed (`detected_at`: when, as the record states it): records the failure, then either sets
// `state` up for the restart (nullopt) or gives up, leaving the newest checkpoint as it is (the exit code).
std::optional<int> after_failure(const SuperviseOptions& o, const RunPaths& paths, Planner& planner,
                                 const AttemptRun& run, AttemptRecord a, double detected_at, LoopState& state) {
  // A failure: what, where, what is left.
  const Failure failure = classify_failure(run.output, run.exit_code);
  const std::string& metrics_path = paths.metrics_path;
  const MetricsRows rows = read_metrics_rows(metrics_path);
  if (fs::exists(metrics_path)) {
    fs::copy_file(metrics_path, fs::path(paths.dir) / fmt::format("attempt_{}.metrics.jsonl", a.number),
                  fs::copy_options::overwrite_existing);
  }
  double fault_at = run.fault_at;
  if (fault_at == 0) fault_at = std::min(detected_at, mtime_unix(metrics_path) > 0 ? mtime_unix(metrics_path) : detected_at);
  a.outcome = fmt::format("failed: {}", failure.why);
  SupervisorRecord& record = state.record;
  record.attempts.push_back(a);
  log::warn("run: attempt {} failed after step {}: {} ({})", a.number, rows.last_step, failure.why,
            failure_kind_name(failure.kind));
  if (!restart_can_cure(failure.kind)) return give_up_at_once(o, paths, failure, record);

  const std::vector<bool> healthy = check_health(o.health_check, state.slots);
  // The checkpoint as the restart will find it: looked at after everything else that runs before it.
  const RestartFrom from = restart_checkpoint(paths.ckpt_root);
  if (from.no_intact) {  // the restart would stop at its load: stop now, with its message
    return give_up_at_once(o, paths, {FailureKind::kNoIntactCheckpoint, {}, *from.no_intact}, record);
  }
  const std::optional<std::string>& latest = from.checkpoint;
  std::int64_t ckpt_step = 0;
  if (latest) ckpt_step = std::stoll(fs::path(*latest).filename().string().substr(5));
  std::vector<Slot> left = remaining_slots(state.slots, failure, healthy);
  const RestartDecision decision =
      decide_restart(static_cast<int>(record.restarts.size()), o.max_restarts, static_cast<int>(left.size()), o.min_ranks);
  const std::string keep_note = fmt::format(
      "nothing is lost: the newest intact checkpoint is {} and metrics.jsonl holds {} (each attempt's rows and log "
      "are kept in {}); continue with the same cleave run command and --resume auto after the --",
      latest.value_or("(none: no checkpoint was written yet)"),
      rows.last_step > 0 ? fmt::format("steps 1..{}", rows.last_step) : std::string("no step yet"), paths.dir);
  const auto give_up = [&](const std::string& why) {
    record.outcome = "failed: " + why;
    save_record(paths, record);
    log::error("run: giving up: {}; {}", why, keep_note);
    return 1;
  };
  if (!decision.restart) return give_up(decision.reason);

  RestartRecord r;
  r.number = static_cast<int>(record.restarts.size()) + 1;
  r.at_unix_s = detected_at;
  r.failed_ranks = failure.ranks;
  r.kind = std::string(failure_kind_name(failure.kind));
  r.why = failure.why;
  for (const Slot& s : state.slots) {
    if (std::find(left.begin(), left.end(), s) == left.end()) r.dropped_slots.push_back(slot_name(s));
  }
  r.old_layout = describe(state.choice);
  r.old_world = state.choice.world();
  r.checkpoint = latest.value_or("");
  r.resumed_at_step = ckpt_step;
  r.last_step_done = rows.last_step;
  r.steps_redone = std::max<std::int64_t>(0, rows.last_step - ckpt_step);
  r.redone_s = rows.ms_after(ckpt_step) * 1e-3;
  r.detection_s = std::max(0.0, detected_at - fault_at);
  r.teardown_s = std::max(0.0, a.ended_unix_s - detected_at);

  // The layout for the ranks left.
  const NextLayout next = next_layout(o, planner, state.choice, static_cast<int>(left.size()));
  if (!next.choice) return give_up(next.note);
  r.layout_choice = next.note;
  r.new_layout = describe(*next.choice);
  r.new_world = next.choice->tp * next.choice->pp * next.choice->dp;
  if (!latest) {
    log::warn("run: no checkpoint yet under {}: restarting from step 0 ({} step{} done so far are redone)",
              paths.ckpt_root, rows.last_step, rows.last_step == 1 ? "" : "s");
  }
  log::info("run: restart {} of at most {}: {} -> {} ({}); from {} ({} step{} redone, {:.2f} s of work); detection "
            "{:.2f} s, teardown {:.2f} s",
            r.number, o.max_restarts, r.old_layout, r.new_layout, r.layout_choice,
            latest ? *latest : std::string("step 0 (no checkpoint yet)"), r.steps_redone,
            r.steps_redone == 1 ? "" : "s", r.redone_s, r.detection_s, r.teardown_s);
  record.restarts.push_back(r);
  save_record(paths, record);

  state.choice = *next.choice;
  state.slots = left;
  state.extra = state.choice.overrides();
  if (o.max_lost_seconds > 0 && rows.mean_step_s() > 0) {
    const std::int64_t interval = checkpoint_interval_for(o.max_lost_seconds, rows.mean_step_s());
    state.extra.push_back(fmt::format("checkpoint.interval={}", interval));
    log::info("run: checkpoint.interval {} (--max-lost-seconds {} at {:.3f} s per step)", interval,
              o.max_lost_seconds, rows.mean_step_s());
  }
  state.restart_file = (fs::path(paths.dir) / fmt::format("restart_{}.json", r.number)).string();
  return std::nullopt;
}

// The keys of every --allow-config-change among the train options ("--allow-config-change K[,K]" or "...=K[,K]").
std::vector<std::string> allowed_changes(const std::vector<std::string>& train_args) {
  const std::string flag = "--allow-config-change";
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < train_args.size(); ++i) {
    std::string list;
    if (train_args[i] == flag && i + 1 < train_args.size()) list = train_args[i + 1];
    else if (train_args[i].starts_with(flag + "=")) list = train_args[i].substr(flag.size() + 1);
    for (std::string& key : train::split_key_list(list)) keys.push_back(std::move(key));
  }
  return keys;
}

// The value of --init-from among the train options ("--init-from DIR" or "--init-from=DIR"); empty when absent.
std::string init_from_arg(const std::vector<std::string>& train_args) {
  const std::string flag = "--init-from";
  std::string dir;
  for (std::size_t i = 0; i < train_args.size(); ++i) {
    if (train_args[i] == flag && i + 1 < train_args.size()) dir = train_args[i + 1];
    else if (train_args[i].starts_with(flag + "=")) dir = train_args[i].substr(flag.size() + 1);
  }
  return dir;
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

}  // namespace

int supervise(const SuperviseOptions& o) {
  const config::RunConfig base = run_config(o);
  train::check_data_files(base);  // a missing data file would fail every attempt: bad input, before any job
  // Bad input stops before any job starts, as the trainer would stop each attempt (ExitCode::kBadInput).
  train::check_allowed_keys(allowed_changes(o.train_args), nlohmann::json::parse(config::to_json(base)));
  const std::string out_dir = base.train.out_dir;
  const std::string ckpt_root =
      base.checkpoint.dir.empty() ? (fs::path(out_dir) / "checkpoints").string() : base.checkpoint.dir;
  CLEAVE_CHECK_INPUT(!o.resume.empty() ||
                   !(fs::exists(fs::path(out_dir) / "metrics.jsonl") || fs::exists(fs::path(out_dir) / "config.json")),
               "run: train.out_dir {} already holds a run; nothing was started. Continue it with --resume auto after "
               "the --, or give another --set train.out_dir=...",
               out_dir);
  CLEAVE_CHECK_INPUT(static_cast<int>(o.slots.size()) >= o.min_ranks, "run: {} slots is fewer than --min-ranks {}",
               o.slots.size(), o.min_ranks);
  LoopState state;
  const SuperviseOptions planning = planning_options(o, base);
  state.choice = first_choice(planning, base);
  fs::create_directories(out_dir);
  const RunPaths paths{out_dir, ckpt_root, fresh_dir(out_dir), (fs::path(out_dir) / "metrics.jsonl").string()};
  Planner planner(planning, base, paths.dir);

  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);

  SupervisorRecord& record = state.record;
  record.slots = o.slots;
  record.outcome = "running";
  state.slots = o.slots;

  for (int attempt = 1;; ++attempt) {
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
    if (!record.restarts.empty()) {
      replace_file(*state.restart_file, fmt::format("{{\"restart\": {}, \"launched_unix_s\": {:.6f}}}\n",
                                                    record.restarts.back().number, a.started_unix_s));
    }
    log::info("run: attempt {} on {} rank{} ({}): {}", attempt, world, world == 1 ? "" : "s", a.layout,
              fmt::join(spec.argv, " "));
    const AttemptRun run = watch_job(spec, o.teardown_grace_s, g_sigterm);
    const int exit_code = run.exit_code;
    double detected_at = run.detected_at;
    a.ended_unix_s = run.ended_at;
    a.exit_code = exit_code;
    if (detected_at == 0 && exit_code != 0) detected_at = a.ended_unix_s;
    if (!record.restarts.empty()) {
      fill_phase_times(record.restarts.back(), paths.metrics_path);
      follow_fallback(record.restarts.back(), paths);
    }

    const bool stopped = run.forwarded && run.output.find("stopped on request (SIGUSR1") != std::string::npos;
    if (exit_code == 0 && !stopped) {
      a.outcome = "completed";
      record.attempts.push_back(a);
      record.outcome = "completed";
      save_record(paths, record);
      merge_restarts_into_run_json((fs::path(out_dir) / "run.json").string(), record);
      log_completion(record, paths.dir);
      return 0;
    }
    if (run.forwarded) {
      const auto latest = restart_checkpoint(ckpt_root).checkpoint;
      a.outcome = fmt::format("stopped on SIGTERM (exit {})", exit_code);
      record.attempts.push_back(a);
      record.outcome = a.outcome;
      save_record(paths, record);
      log::info("run: stopped on SIGTERM; newest intact checkpoint: {}; continue with the same command and "
                "--resume auto after the --", latest.value_or("(none)"));
      return exit_code == 0 ? train::kStoppedExitCode : 1;
    }
    if (const std::optional<int> code = after_failure(o, paths, planner, run, a, detected_at, state)) return *code;
  }
}

}  // namespace cleave::supervise
