// See plan_trial.hpp.
#include "engine/cli/plan_trial.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"

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

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
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

}  // namespace

std::vector<std::string> trial_launcher(const std::string& launcher, int world) {
  std::vector<std::string> argv;
  std::istringstream words(launcher.empty() ? std::string("mpiexec") : launcher);
  for (std::string w; words >> w;) argv.push_back(w);
  CLEAVE_CHECK(!argv.empty(), "plan: --launcher is empty; give the MPI launcher, e.g. --launcher \"mpiexec --oversubscribe\"");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (launcher.empty() && world > cores) argv.push_back("--oversubscribe");
  argv.push_back("-n");
  argv.push_back(std::to_string(world));
  return argv;
}

std::vector<TrialResult> run_trials(const std::string& config_path, const std::vector<std::string>& overrides,
                                    const std::vector<planner::PlanEstimate>& ranked, const TrialOptions& options) {
  CLEAVE_CHECK(std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMI_SIZE") == nullptr,
               "plan --trial: run `cleave plan` itself without mpiexec; --trial starts `mpiexec -n {} cleave train` "
               "for each plan (Open MPI does not start a job from inside another)", options.world);
  CLEAVE_CHECK(options.steps > kTrialWarmupSteps, "plan: --trial-steps must be > {} (the first {} are not counted), got {}",
               kTrialWarmupSteps, kTrialWarmupSteps, options.steps);
  const std::vector<std::string> launcher = trial_launcher(options.launcher, options.world);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string pattern = (fs::temp_directory_path() / "cleave-trial-XXXXXX").string();
  CLEAVE_CHECK(::mkdtemp(pattern.data()) != nullptr, "plan --trial: cannot create a directory under {}",
               fs::temp_directory_path().string());
  const fs::path dir = pattern;
  // The trial runs' directory goes however this returns (a config that fails to load throws mid-loop).
  struct RemoveOnExit {
    fs::path path;
    ~RemoveOnExit() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } remove_dir{dir};
  std::vector<TrialResult> results;
  const int count = std::min<int>(options.plans, static_cast<int>(ranked.size()));
  for (int i = 0; i < count; ++i) {
    TrialResult r;
    r.predicted_rank = i + 1;
    r.plan = ranked[static_cast<std::size_t>(i)];
    const fs::path run = dir / fmt::format("plan_{}", i + 1);
    std::vector<std::string> all = overrides;
    for (const auto& o : r.plan.choice.overrides()) all.push_back(o);
    for (const std::string& o : {fmt::format("train.steps={}", options.steps), "train.out_dir=" + run.string(),
                                fmt::format("train.log_interval={}", options.steps), std::string("train.eval_interval=0"),
                                std::string("train.eval_batches=0"), std::string("train.report=false"),
                                std::string("checkpoint.save_final=false"), std::string("checkpoint.interval=0")}) {
      all.push_back(o);
    }
    config::RunConfig trial = config::load_config(config_path, all);
    if (options.memory_limit > 0) trial.device.memory_limit = options.memory_limit;
    const std::string plan_file = (dir / fmt::format("plan_{}.json", i + 1)).string();
    std::ofstream(plan_file) << config::to_json(trial) << "\n";
    std::vector<std::string> argv = launcher;
    for (const std::string& a : {self, std::string("train"), plan_file}) argv.push_back(a);
    const std::string log = run.string() + ".log";
    const int status = run_logged(argv, log);
    if (status == -1) {
      CLEAVE_THROW("plan --trial: cannot start '{}' (install Open MPI's mpiexec or name the launcher with --launcher)",
                   argv.front());
    }
    r.measured_s = status == 0 ? median_step_s((run / "metrics.jsonl").string()) : 0.0;
    r.measured = r.measured_s > 0;
    if (!r.measured) r.error = fmt::format("exit {}: {}", status, last_line(log));
    results.push_back(std::move(r));
  }
  std::stable_sort(results.begin(), results.end(), [](const TrialResult& a, const TrialResult& b) {
    if (a.measured != b.measured) return a.measured;
    return a.measured && a.measured_s < b.measured_s;
  });
  return results;
}

}  // namespace cleave::cli
