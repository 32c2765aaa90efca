// See plan_trial.hpp.
#include "engine/cli/plan_trial.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/progress.hpp"

extern char** environ;

namespace cleave::cli {
namespace {

namespace fs = std::filesystem;

// Runs argv with stdout and stderr into `log`; returns the exit status (-1 when it could not start).
int run_logged(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int started = posix_spawnp(&pid, args[0], &files, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (started != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Why a trial run failed: its first error line (a rank's "[rank R/N] error: ..." or the config's "error: ..."),
// else its last line. The launcher's closing banner ("-----", "Exit code: 1") is last and says nothing.
std::string failure_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find("error: ") != std::string::npos) return line;
    if (!line.empty()) last = line;
  }
  return last.empty() ? "(no output)" : last;
}

// Median step time (seconds) of metrics.jsonl after the warm-up; 0 when it has no counted step.
double median_step_s(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> steps;
  std::string line;
  for (int row = 0; std::getline(in, line); ++row) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (row >= kTrialWarmupSteps && j.is_object() && j.contains("step_ms")) steps.push_back(j["step_ms"].get<double>() / 1e3);
  }
  if (steps.empty()) return 0.0;
  std::sort(steps.begin(), steps.end());
  const std::size_t n = steps.size();
  return n % 2 ? steps[n / 2] : (steps[n / 2 - 1] + steps[n / 2]) / 2;
}

// The run's traced last step (trace.json), attributed on the plan's busiest predicted pp rank; a trace that
// cannot be read is said on stderr and adds nothing (the step time still counts).
void add_traced_step(TrialResult& r, const std::string& trace) {
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    CLEAVE_CHECK(in.good() || in.eof(), "cannot read {}", trace);
    r.round_steps.push_back(planner::measure_step(planner::read_chrome_trace(text, trace), r.plan.breakdown.rank));
  } catch (const Error& e) {
    std::fprintf(stderr, "trial: no term-by-term figures from this run: %s\n", e.what());
  }
}

// The trial's own checks, before any run: not under a launcher, enough steps, at least one round.
void check_trial_options(const TrialOptions& options) {
  CLEAVE_CHECK_INPUT(std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMI_SIZE") == nullptr,
               "plan --trial: run `cleave plan` itself without mpiexec; --trial starts `mpiexec -n {} cleave train` "
               "for each plan (Open MPI does not start a job from inside another)", options.world);
  CLEAVE_CHECK_INPUT(options.steps > kTrialWarmupSteps, "plan: --trial-steps must be > {} (the first {} are not counted), got {}",
               kTrialWarmupSteps, kTrialWarmupSteps, options.steps);
  CLEAVE_CHECK_INPUT(options.max_rounds >= 1, "plan: --trial-rounds must be >= 1, got {}", options.max_rounds);
}

// A fresh temporary directory for the trial's configs and runs.
fs::path make_trial_dir() {
  std::string pattern = (fs::temp_directory_path() / "cleave-trial-XXXXXX").string();
  CLEAVE_CHECK(::mkdtemp(pattern.data()) != nullptr, "plan --trial: cannot create a directory under {}",
               fs::temp_directory_path().string());
  return pattern;
}

// Plan i's config (1-based file plan_<i>.json in `dir`): the source config with the plan's keys, `options.steps`
// steps, no evaluation, report or checkpoint. Each run gets a fresh out_dir on the command line (train refuses to
// write over a run).
std::string write_trial_config(const std::string& config_path, const std::vector<std::string>& overrides,
                               const planner::PlanEstimate& plan, const TrialOptions& options, const fs::path& dir,
                               std::size_t i) {
  std::vector<std::string> all = overrides;
  for (const auto& o : plan.choice.overrides()) all.push_back(o);
  for (const std::string& o : {fmt::format("train.steps={}", options.steps),
                              fmt::format("train.log_interval={}", options.steps), std::string("train.eval_interval=0"),
                              std::string("train.eval_batches=0"), std::string("train.report=false"),
                              std::string("checkpoint.save_final=false"), std::string("checkpoint.interval=0")}) {
    all.push_back(o);
  }
  if (options.measure_terms) all.push_back("train.trace=true");
  config::RunConfig trial = config::load_config(config_path, all);
  if (options.memory_limit > 0) trial.device.memory_limit = options.memory_limit;
  const std::string file = (dir / fmt::format("plan_{}.json", i + 1)).string();
  std::ofstream(file) << config::to_json(trial) << "\n";
  return file;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::vector<std::vector<double>> round_medians_of(const std::vector<TrialResult>& results) {
  std::vector<std::vector<double>> m;
  for (const auto& r : results) m.push_back(r.round_medians);
  return m;
}

// What one round needs besides the plans: the launcher's argv, this cleave, the trial's directory, each plan's
// config, the options, the progress line and when the trial started.
struct TrialRun {
  std::vector<std::string> launcher;
  std::string self;
  fs::path dir;
  std::vector<std::string> plan_files;
  const TrialOptions& options;
  ProgressLine& progress;
  std::chrono::steady_clock::time_point started;
};

// Round `round` (0-based): every plan that has not failed trains once, in predicted order; a run's median step is
// the round's figure, a failed run ends the plan's rounds. Returns whether any plan measured.
bool run_round(const TrialRun& t, int round, std::vector<TrialResult>& results) {
  bool any = false;
  for (std::size_t i = 0; i < results.size(); ++i) {
    TrialResult& r = results[i];
    if (!r.error.empty()) continue;  // failed in an earlier round: no further rounds
    const fs::path run = t.dir / fmt::format("plan_{}_round_{}", i + 1, round + 1);
    std::vector<std::string> argv = t.launcher;
    for (const std::string& a : {t.self, std::string("train"), t.plan_files[i], std::string("--set"),
                                 "train.out_dir=" + run.string()}) {
      argv.push_back(a);
    }
    const std::string log = run.string() + ".log";
    const int status = run_logged(argv, log);
    if (status == -1) {
      CLEAVE_THROW("plan --trial: cannot start '{}' (install Open MPI's mpiexec or name the launcher with --launcher)",
                   argv.front());
    }
    const double median = status == 0 ? median_step_s((run / "metrics.jsonl").string()) : 0.0;
    const planner::PlanChoice& c = r.plan.choice;
    const std::string what =
        fmt::format("round {}/{}, plan {} of {} (#{} {} {} v{} micro {} zero {}{} recompute {})", round + 1,
                    t.options.max_rounds, i + 1, results.size(), r.predicted_place, c.layout(), c.schedule,
                    c.virtual_stages, c.micro_batch, c.zero_stage, c.sequence_parallel ? " sp" : "", c.recompute);
    if (median > 0) {
      r.round_medians.push_back(median);
      if (t.options.measure_terms) add_traced_step(r, (run / "trace.json").string());
      any = true;
      t.progress.line(fmt::format("{}: median step {:.2f} ms, {}", what, median * 1e3,
                                  format_seconds(seconds_since(t.started))));
    } else {
      r.error = fmt::format("exit {}: {}", status, failure_line(log));
      r.round_medians.clear();  // a plan that failed once is not ranked on its other rounds
      r.round_steps.clear();
      t.progress.line(fmt::format("{}: failed ({})", what, r.error));
    }
  }
  return any;
}

// Why the rounds stopped when no earlier reason was given: nothing trained, every spread settled, or the last round.
std::string stop_reason_at_end(const std::vector<TrialResult>& results, const TrialOptions& options, int min_rounds,
                               int rounds) {
  const bool measured = std::any_of(results.begin(), results.end(),
                                    [](const TrialResult& r) { return !r.round_medians.empty(); });
  if (!measured) return "no plan trained";
  if (planner::trial_settled(round_medians_of(results), options.spread_bound, min_rounds)) {
    return fmt::format("every spread <= {:.1f}% after {} rounds", 100 * options.spread_bound, rounds);
  }
  return fmt::format("the most rounds, {} (--trial-rounds)", rounds);
}

// Each plan's figures over its rounds, and the plans in measured order (planner::rank_measured).
std::vector<TrialResult> rank_results(std::vector<TrialResult>& results) {
  std::vector<planner::MeasuredPlan> figures;
  for (auto& r : results) {
    r.measured = planner::summarize_rounds(r.round_medians);
    r.measured_step = planner::median_step(r.round_steps);
    figures.push_back(r.measured);
  }
  std::vector<TrialResult> ranked;
  for (const planner::Placed& p : planner::rank_measured(figures)) {
    TrialResult r = results[p.index];
    r.place = p.place;
    r.tied = p.tied;
    ranked.push_back(std::move(r));
  }
  return ranked;
}

}  // namespace

std::vector<std::string> trial_launcher(const std::string& launcher, int world) {
  std::vector<std::string> argv;
  std::istringstream words(launcher.empty() ? std::string("mpiexec") : launcher);
  for (std::string w; words >> w;) argv.push_back(w);
  CLEAVE_CHECK_INPUT(!argv.empty(), "plan: --launcher is empty; give the MPI launcher, e.g. --launcher \"mpiexec --oversubscribe\"");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (launcher.empty() && world > cores) argv.push_back("--oversubscribe");
  argv.push_back("-n");
  argv.push_back(std::to_string(world));
  return argv;
}

TrialOutcome run_trials(const std::string& config_path, const std::vector<std::string>& overrides,
                        const std::vector<planner::PlanEstimate>& plans, const TrialOptions& options) {
  check_trial_options(options);
  const std::vector<std::string> launcher = trial_launcher(options.launcher, options.world);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const fs::path dir = make_trial_dir();
  // The trial runs' directory goes however this returns (a config that fails to load throws mid-loop).
  struct RemoveOnExit {
    fs::path path;
    ~RemoveOnExit() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } remove_dir{dir};
  std::vector<TrialResult> results;
  std::vector<std::string> plan_files;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    TrialResult r;
    r.predicted_place = static_cast<int>(i) + 1;
    r.plan = plans[i];
    plan_files.push_back(write_trial_config(config_path, overrides, r.plan, options, dir, i));
    results.push_back(std::move(r));
  }
  const int min_rounds = std::min(kTrialMinRounds, options.max_rounds);
  ProgressLine progress("trial");
  const TrialRun run{launcher, self, dir, std::move(plan_files), options, progress, std::chrono::steady_clock::now()};
  TrialOutcome outcome;
  double last_round_s = 0;
  for (int round = 0; round < options.max_rounds; ++round) {
    if (round > 0 && planner::trial_settled(round_medians_of(results), options.spread_bound, min_rounds)) {
      outcome.stopped = fmt::format("every spread <= {:.1f}% after {} rounds", 100 * options.spread_bound, round);
      break;
    }
    if (round > 0 && seconds_since(run.started) + last_round_s > options.budget_s) {
      outcome.stopped = fmt::format("the budget of {} would end during round {} (rounds take {})",
                                    format_seconds(options.budget_s), round + 1, format_seconds(last_round_s));
      break;
    }
    const auto round_start = std::chrono::steady_clock::now();
    const bool any = run_round(run, round, results);
    outcome.rounds = round + 1;
    last_round_s = seconds_since(round_start);
    if (!any) break;
  }
  if (outcome.stopped.empty()) outcome.stopped = stop_reason_at_end(results, options, min_rounds, outcome.rounds);
  outcome.ranked = rank_results(results);
  return outcome;
}

}  // namespace cleave::cli
