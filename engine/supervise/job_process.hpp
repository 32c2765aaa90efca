// One attempt of a supervised job as a child process: `cleave run` starts the launcher (mpirun, srun) in a process
// group of its own with stdout and stderr on one pipe, copies every byte to its own stderr and to the attempt's log
// file as it arrives, keeps the text for classify_failure, and can end the whole group.
//
// Invariants: the child is started in a new process group (setpgid), so ending the job reaches every process the
// launcher started on this node without touching the supervisor; the destructor ends and reaps what is still
// running, so an exception in the supervisor leaves no rank behind. POSIX only (fork, exec, poll, /proc).
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace cleave::supervise {

struct JobSpec {
  std::vector<std::string> argv;                            // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> set_env;  // added to (or replacing in) the environment
  std::vector<std::string> unset_env;
  std::string log_path;                                     // the attempt's output, also echoed to stderr
};

class JobProcess {
 public:
  // Starts the job; throws Error naming argv[0] when it cannot be started.
  explicit JobProcess(const JobSpec& spec);
  ~JobProcess();
  JobProcess(const JobProcess&) = delete;
  JobProcess& operator=(const JobProcess&) = delete;

  // Waits up to `timeout_ms` for output or the launcher's exit; returns the bytes read this call.
  std::string poll(int timeout_ms);
  bool exited() const { return exited_; }
  int exit_code() const { return exit_code_; }  // 128 + signal when it died on one
  const std::string& output() const { return output_; }
  // A signal to the launcher process only (SIGUSR1: mpirun and srun forward it to every rank).
  void signal_launcher(int sig);
  // Ends the whole group: SIGTERM, then SIGKILL after `grace_ms`; returns once no process of it is left alive
  // (zombies left to init do not count).
  void end_group(int grace_ms);
  // Whether a process of the group other than a zombie is still alive.
  bool group_alive() const;

 private:
  void reap(bool block);

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  int exit_code_ = 0;
  std::string output_;
  std::FILE* log_ = nullptr;
};

}  // namespace cleave::supervise
