// One attempt of `cleave run` (attempt.hpp): its command line and the watch over its job.
#include "engine/supervise/attempt.hpp"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

#include "engine/core/error.hpp"
#include "engine/core/executable.hpp"
#include "engine/core/input_error.hpp"
#include "engine/core/log.hpp"
#include "engine/supervise/restart_record.hpp"

namespace cleave::supervise {

namespace fs = std::filesystem;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool names_a_failure(const std::string& text) {
  static const std::regex failure(
      R"(exited on signal|the job has been aborted|not answering within|\] error: |MPI_ABORT was invoked|task [0-9]+: (Killed|Terminated|Exited)|comm timeout after)");
  return std::regex_search(text, failure);
}

std::vector<std::string> launcher_words(const SuperviseOptions& o) {
  if (!o.launcher.empty()) return o.launcher;
  return o.slurm ? std::vector<std::string>{"srun", "--mpi=pmix", "--kill-on-bad-exit=1"} : std::vector<std::string>{"mpiexec"};
}

void check_launcher(const SuperviseOptions& o) {
  const std::vector<std::string> words = launcher_words(o);
  CLEAVE_CHECK_INPUT(!words.empty() && can_execute(words.front()),
                     "run: the launcher {} cannot be started ({}); nothing was started (install it, or give "
                     "--launcher CMD, e.g. --launcher \"mpiexec --oversubscribe\")",
                     words.empty() ? std::string("(none)") : words.front(),
                     words.empty() ? "--launcher is empty" : why_not_executable(words.front()));
}

JobSpec attempt_job(const SuperviseOptions& o, const std::string& dir, const std::vector<Slot>& used,
                    const std::vector<std::string>& extra, int attempt, const std::optional<std::string>& restart_file) {
  const int world = static_cast<int>(used.size());
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
  return spec;
}

AttemptRun watch_job(const JobSpec& spec, double teardown_grace_s, const std::atomic<bool>& sigterm) {
  AttemptRun run;
  JobProcess job(spec);
  std::string tail;  // the text not yet searched (lines may arrive in pieces)
  while (!job.exited()) {
    tail += job.poll(50);
    if (run.fault_at == 0 && tail.find("fault injection (CLEAVE_FAULT_INJECT)") != std::string::npos) run.fault_at = unix_now();
    if (run.detected_at == 0 && names_a_failure(tail)) run.detected_at = unix_now();
    if (tail.size() > 4096) tail.erase(0, tail.size() - 2048);
    if (sigterm.load() && !run.forwarded) {
      log::info("run: SIGTERM: asking every rank to save a checkpoint and stop (SIGUSR1 through the launcher)");
      job.signal_launcher(SIGUSR1);
      run.forwarded = true;
    }
    if (run.detected_at > 0 && unix_now() - run.detected_at > teardown_grace_s) {
      log::warn("run: the launcher has not ended the job {:.0f} s after the failure; ending it", teardown_grace_s);
      job.end_group(2000);
    }
  }
  // Teardown ends when no process of the job is left (the launcher's ranks may outlive it briefly).
  const double exited_at = unix_now();
  while (job.group_alive()) {
    job.poll(10);
    if (unix_now() - exited_at > teardown_grace_s) job.end_group(2000);
  }
  for (std::string more = job.poll(0); !more.empty(); more = job.poll(0)) {}
  run.exit_code = job.exit_code();
  run.output = job.output();
  run.ended_at = unix_now();
  return run;
}

}  // namespace cleave::supervise
