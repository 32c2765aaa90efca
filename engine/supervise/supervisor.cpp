// The supervisor's loop (supervisor.hpp).
#include "engine/supervise/supervisor.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/checkpoint/checkpoint_dir.hpp"
#include "engine/config/config.hpp"
#include "engine/core/allocator.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"
#include "engine/planner/hardware_profile.hpp"
#include "engine/planner/plan_search.hpp"
#include "engine/run_plan/plan.hpp"
#include "engine/supervise/job_process.hpp"
#include "engine/supervise/restart_record.hpp"
#include "engine/train/stop_request.hpp"

namespace cleave::supervise {
namespace {

namespace fs = std::filesystem;

// SIGTERM to `cleave run` (a preemption notice): static by necessity, a handler reaches nothing else. The loop
// forwards it to the ranks as SIGUSR1 (engine/train/stop_request.hpp) and ends once they have saved.
std::atomic<bool> g_sigterm{false};
void on_sigterm(int) { g_sigterm.store(true); }

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

// A line that says the job failed, as it streams in (the detection moment).
bool names_a_failure(const std::string& text) {
  static const std::regex failure(
      R"(exited on signal|the job has been aborted|not answering within|\] error: |MPI_ABORT was invoked|task [0-9]+: (Killed|Terminated|Exited)|comm timeout after)");
  return std::regex_search(text, failure);
}

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

// --launcher's words, else srun inside a SLURM allocation, else mpiexec.
std::vector<std::string> launcher_words(const SuperviseOptions& o) {
  if (!o.launcher.empty()) return o.launcher;
  return o.slurm ? std::vector<std::string>{"srun", "--mpi=pmix", "--kill-on-bad-exit=1"} : std::vector<std::string>{"mpiexec"};
}

// Whether `program` can be executed: a path (with a '/') that is an executable file, or a name an executable file
// of the PATH directories has (as execvp looks it up).
bool can_execute(const std::string& program) {
  const auto executable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return executable(program);
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (executable(fs::path(dir.empty() ? "." : dir) / program)) return true;
  }
  return false;
}

// The launcher, checked before the first attempt: one that cannot start fails every attempt at once (exit 127),
// and the supervisor would spend its restart budget and re-plan each time before saying so.
void check_launcher(const SuperviseOptions& o) {
  const std::vector<std::string> words = launcher_words(o);
  CLEAVE_CHECK(!words.empty() && can_execute(words.front()),
               "run: the launcher {} cannot be started ({}); nothing was started (install it, or give --launcher CMD, "
               "e.g. --launcher \"mpiexec --oversubscribe\")",
               words.empty() ? std::string("(none)") : words.front(),
               words.empty() ? "--launcher is empty"
               : words.front().find('/') != std::string::npos ? "not an executable file"
                                                               : "not found in PATH");
}

// The re-plan's inputs, checked before the first attempt starts: read only at the first failure, a bad --profile or
// --memory-limit would end the job hours in, exactly when the re-plan is needed. Under --keep-layout nothing
// re-plans, so either would be accepted and do nothing: refused.
void check_replan_inputs(const SuperviseOptions& o, const config::RunConfig& base, int world) {
  if (o.keep_layout) {
    CLEAVE_CHECK(o.profile.empty() && o.memory_limit.empty(),
                 "run: {} prices the planner's re-plan, but --keep-layout keeps tp x pp and never re-plans; nothing "
                 "was started (drop {} or --keep-layout)", o.profile.empty() ? "--memory-limit" : "--profile",
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

}  // namespace

int supervise(const SuperviseOptions& o) {
  const config::RunConfig base = config::load_config(o.config_path, o.overrides);
  const std::string out_dir = base.train.out_dir;
  const std::string ckpt_root =
      base.checkpoint.dir.empty() ? (fs::path(out_dir) / "checkpoints").string() : base.checkpoint.dir;
  CLEAVE_CHECK(!o.resume.empty() ||
                   !(fs::exists(fs::path(out_dir) / "metrics.jsonl") || fs::exists(fs::path(out_dir) / "config.json")),
               "run: train.out_dir {} already holds a run; nothing was started. Continue it with --resume auto after "
               "the --, or give another --set train.out_dir=...",
               out_dir);
  CLEAVE_CHECK(static_cast<int>(o.slots.size()) >= o.min_ranks, "run: {} slots is fewer than --min-ranks {}",
               o.slots.size(), o.min_ranks);
  planner::PlanChoice choice;
  try {
    // A config that fixes dp uses tp x pp x dp of the slots (the rest idle); dp -1 fills them.
    const auto& p = base.parallel;
    const int world = p.data_parallel_size > 0
                          ? p.tensor_model_parallel_size * p.pipeline_model_parallel_size * p.data_parallel_size
                          : static_cast<int>(o.slots.size());
    choice = planner::choice_of_config(o.config_path, o.overrides, world);
    static_cast<void>(choice.apply_to(base));  // the config's own checks at this world, before anything starts
  } catch (const std::exception& e) {
    CLEAVE_THROW("run: the config does not run on the {} slots given: {}; nothing was started (set parallel.* "
                 "after the -- or give other --slots)",
                 o.slots.size(), e.what());
  }
  const int first_world = choice.tp * choice.pp * choice.dp;
  CLEAVE_CHECK(first_world <= static_cast<int>(o.slots.size()),
               "run: the config's layout {} needs {} ranks but only {} slots are given", choice.layout(), first_world,
               o.slots.size());
  check_launcher(o);
  check_replan_inputs(o, base, first_world);
  fs::create_directories(out_dir);
  const std::string dir = fresh_dir(out_dir);
  const std::string metrics_path = (fs::path(out_dir) / "metrics.jsonl").string();
  Planner planner(o, base, dir);

  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);

  SupervisorRecord record;
  record.slots = o.slots;
  record.outcome = "running";
  std::vector<Slot> slots = o.slots;
  std::vector<std::string> extra;  // overrides of the restarts: the layout, the checkpoint interval
  std::optional<std::string> restart_file;
  const auto save_record = [&] { replace_file((fs::path(dir) / "supervisor.json").string(), supervisor_json_text(record)); };

  for (int attempt = 1;; ++attempt) {
    const int world = choice.tp * choice.pp * choice.dp;
    const std::vector<Slot> used(slots.begin(), slots.begin() + world);
    std::vector<std::string> argv = launcher_words(o);
    argv.insert(argv.end(), {"-n", std::to_string(world)});
    if (o.use_hostfile && !o.slurm) {
      const std::string hosts = (fs::path(dir) / fmt::format("hosts.attempt_{}", attempt)).string();
      replace_file(hosts, hostfile_text(used));
      argv.insert(argv.end(), {"--hostfile", hosts});
    }
    argv.insert(argv.end(), {o.cleave, "train"});
    if (!o.config_path.empty()) argv.push_back(o.config_path);
    for (const auto& v : o.overrides) argv.insert(argv.end(), {"--set", v});
    for (const auto& v : extra) argv.insert(argv.end(), {"--set", v});
    argv.insert(argv.end(), o.train_args.begin(), o.train_args.end());
    if (attempt > 1) argv.insert(argv.end(), {"--resume", "auto", "--restart-record", *restart_file});
    else if (!o.resume.empty()) argv.insert(argv.end(), {"--resume", o.resume});

    JobSpec spec;
    spec.argv = argv;
    spec.log_path = (fs::path(dir) / fmt::format("attempt_{}.log", attempt)).string();
    // Test hook (docs/multi-rank.md): CLEAVE_FAULT_INJECT_<attempt> is the CLEAVE_FAULT_INJECT of that attempt only;
    // a plain CLEAVE_FAULT_INJECT reaches every attempt (a failure that repeats).
    if (const char* per = std::getenv(fmt::format("CLEAVE_FAULT_INJECT_{}", attempt).c_str())) {
      spec.set_env.emplace_back("CLEAVE_FAULT_INJECT", per);
    }
    AttemptRecord a;
    a.number = attempt;
    a.world = world;
    a.layout = describe(choice);
    a.command = argv;
    a.log = spec.log_path;
    a.started_unix_s = unix_now();
    if (!record.restarts.empty()) {
      replace_file(*restart_file, fmt::format("{{\"restart\": {}, \"launched_unix_s\": {:.6f}}}\n",
                                              record.restarts.back().number, a.started_unix_s));
    }
    log::info("run: attempt {} on {} rank{} ({}): {}", attempt, world, world == 1 ? "" : "s", a.layout,
              fmt::join(argv, " "));
    double fault_at = 0, detected_at = 0;
    bool forwarded = false;
    int exit_code = 0;
    std::string output;
    {
      JobProcess job(spec);
      std::string tail;  // the text not yet searched (lines may arrive in pieces)
      while (!job.exited()) {
        tail += job.poll(50);
        if (fault_at == 0 && tail.find("fault injection (CLEAVE_FAULT_INJECT)") != std::string::npos) fault_at = unix_now();
        if (detected_at == 0 && names_a_failure(tail)) detected_at = unix_now();
        if (tail.size() > 4096) tail.erase(0, tail.size() - 2048);
        if (g_sigterm.load() && !forwarded) {
          log::info("run: SIGTERM: asking every rank to save a checkpoint and stop (SIGUSR1 through the launcher)");
          job.signal_launcher(SIGUSR1);
          forwarded = true;
        }
        if (detected_at > 0 && unix_now() - detected_at > o.teardown_grace_s) {
          log::warn("run: the launcher has not ended the job {:.0f} s after the failure; ending it", o.teardown_grace_s);
          job.end_group(2000);
        }
      }
      // Teardown ends when no process of the job is left (the launcher's ranks may outlive it briefly).
      const double exited_at = unix_now();
      while (job.group_alive()) {
        job.poll(10);
        if (unix_now() - exited_at > o.teardown_grace_s) job.end_group(2000);
      }
      for (std::string more = job.poll(0); !more.empty(); more = job.poll(0)) {}
      exit_code = job.exit_code();
      output = job.output();
      a.ended_unix_s = unix_now();
      a.exit_code = exit_code;
      if (detected_at == 0 && exit_code != 0) detected_at = a.ended_unix_s;
      if (!record.restarts.empty()) fill_phase_times(record.restarts.back(), metrics_path);

      const bool stopped = forwarded && output.find("stopped on request (SIGUSR1") != std::string::npos;
      if (exit_code == 0 && !stopped) {
        a.outcome = "completed";
        record.attempts.push_back(a);
        record.outcome = "completed";
        save_record();
        const std::string run_json = (fs::path(out_dir) / "run.json").string();
        merge_restarts_into_run_json(run_json, record);
        log::info("run: completed after {} restart{}; records in {} and run.json", record.restarts.size(),
                  record.restarts.size() == 1 ? "" : "s", (fs::path(dir) / "supervisor.json").string());
        for (const RestartRecord& r : record.restarts) {
          log::info("run: restart {}: {}; {} -> {}; {} step{} redone; lost {:.2f} s (detection {:.2f}, teardown {:.2f}, "
                    "start-up {:.2f}, load {:.2f}, first step {:.2f}, redone work {:.2f})",
                    r.number, r.why, r.old_layout, r.new_layout, r.steps_redone, r.steps_redone == 1 ? "" : "s",
                    r.seconds_lost(), r.detection_s, r.teardown_s, r.startup_s.value_or(0), r.load_s.value_or(0),
                    r.first_step_s.value_or(0), r.redone_s);
        }
        return 0;
      }
      if (forwarded) {
        const auto latest = checkpoint::latest_step_dir(ckpt_root);
        a.outcome = fmt::format("stopped on SIGTERM (exit {})", exit_code);
        record.attempts.push_back(a);
        record.outcome = a.outcome;
        save_record();
        log::info("run: stopped on SIGTERM; newest complete checkpoint: {}; continue with the same command and "
                  "--resume auto after the --", latest.value_or("(none)"));
        return exit_code == 0 ? train::kStoppedExitCode : 1;
      }
    }
    // A failure: what, where, what is left.
    const Failure failure = classify_failure(output, exit_code);
    const MetricsRows rows = read_metrics_rows(metrics_path);
    if (fs::exists(metrics_path)) {
      fs::copy_file(metrics_path, fs::path(dir) / fmt::format("attempt_{}.metrics.jsonl", attempt),
                    fs::copy_options::overwrite_existing);
    }
    if (fault_at == 0) fault_at = std::min(detected_at, mtime_unix(metrics_path) > 0 ? mtime_unix(metrics_path) : detected_at);
    a.outcome = fmt::format("failed: {}", failure.why);
    record.attempts.push_back(a);
    const auto latest = checkpoint::latest_step_dir(ckpt_root);
    std::int64_t ckpt_step = 0;
    if (latest) ckpt_step = std::stoll(fs::path(*latest).filename().string().substr(5));
    log::warn("run: attempt {} failed after step {}: {} ({})", attempt, rows.last_step, failure.why,
              failure_kind_name(failure.kind));

    const std::vector<bool> healthy = check_health(o.health_check, slots);
    std::vector<Slot> left = remaining_slots(slots, failure, healthy);
    const RestartDecision decision =
        decide_restart(static_cast<int>(record.restarts.size()), o.max_restarts, static_cast<int>(left.size()), o.min_ranks);
    const std::string keep_note = fmt::format(
        "nothing is lost: the newest complete checkpoint is {} and metrics.jsonl holds {} (each attempt's rows and log "
        "are kept in {}); continue with the same cleave run command and --resume auto after the --",
        latest.value_or("(none: no checkpoint was written yet)"),
        rows.last_step > 0 ? fmt::format("steps 1..{}", rows.last_step) : std::string("no step yet"), dir);
    const auto give_up = [&](const std::string& why) {
      record.outcome = "failed: " + why;
      save_record();
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
    for (const Slot& s : slots) {
      if (std::find(left.begin(), left.end(), s) == left.end()) r.dropped_slots.push_back(slot_name(s));
    }
    r.old_layout = describe(choice);
    r.old_world = world;
    r.checkpoint = latest.value_or("");
    r.resumed_at_step = ckpt_step;
    r.last_step_done = rows.last_step;
    r.steps_redone = std::max<std::int64_t>(0, rows.last_step - ckpt_step);
    r.redone_s = rows.ms_after(ckpt_step) * 1e-3;
    r.detection_s = std::max(0.0, detected_at - fault_at);
    r.teardown_s = std::max(0.0, a.ended_unix_s - detected_at);

    // The layout for the ranks left.
    const int n = static_cast<int>(left.size());
    std::optional<planner::PlanChoice> next;
    if (o.keep_layout) {
      next = keep_layout(choice, n);
      if (!next) {
        return give_up(fmt::format("--keep-layout keeps tp x pp = {} x {} = {} ranks, but {} rank{} left (the smallest "
                                   "world for this layout is {})",
                                   choice.tp, choice.pp, choice.tp * choice.pp, n, n == 1 ? " is" : "s are",
                                   choice.tp * choice.pp));
      }
      r.layout_choice = "kept tp x pp (--keep-layout), dp shrunk";
    } else {
      PlannerPick pick = planner.best(n);
      if (!pick.choice) {
        const int original = static_cast<int>(o.slots.size());
        const auto smallest = smallest_world(n + 1, std::max(2 * original, n + 1), [&](int w) {
          return planner.best(w).choice.has_value();
        });
        return give_up(fmt::format("no layout fits at the {} rank{} left ({}); {}", n, n == 1 ? "" : "s", pick.note,
                                   smallest ? fmt::format("the smallest world that fits is {} ranks", *smallest)
                                            : fmt::format("no world up to {} ranks fits either", 2 * original)));
      }
      next = pick.choice;
      r.layout_choice = pick.note;
    }
    r.new_layout = describe(*next);
    r.new_world = next->tp * next->pp * next->dp;
    if (!latest) {
      log::warn("run: no checkpoint yet under {}: restarting from step 0 ({} step{} done so far are redone)", ckpt_root,
                rows.last_step, rows.last_step == 1 ? "" : "s");
    }
    log::info("run: restart {} of at most {}: {} -> {} ({}); from {} ({} step{} redone, {:.2f} s of work); detection "
              "{:.2f} s, teardown {:.2f} s",
              r.number, o.max_restarts, r.old_layout, r.new_layout, r.layout_choice,
              latest ? *latest : std::string("step 0 (no checkpoint yet)"), r.steps_redone,
              r.steps_redone == 1 ? "" : "s", r.redone_s, r.detection_s, r.teardown_s);
    record.restarts.push_back(r);
    save_record();

    choice = *next;
    slots = left;
    extra = choice.overrides();
    if (o.max_lost_seconds > 0 && rows.mean_step_s() > 0) {
      const std::int64_t interval = checkpoint_interval_for(o.max_lost_seconds, rows.mean_step_s());
      extra.push_back(fmt::format("checkpoint.interval={}", interval));
      log::info("run: checkpoint.interval {} (--max-lost-seconds {} at {:.3f} s per step)", interval,
                o.max_lost_seconds, rows.mean_step_s());
    }
    restart_file = (fs::path(dir) / fmt::format("restart_{}.json", r.number)).string();
  }
}

}  // namespace cleave::supervise
