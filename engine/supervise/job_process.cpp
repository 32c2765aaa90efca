// The supervised job's process (job_process.hpp).
#include "engine/supervise/job_process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "engine/core/error.hpp"

namespace cleave::supervise {
namespace {

// Live (not zombie) processes whose process group is `pgid`, from /proc/PID/stat ("pid (comm) S ppid pgrp ...").
bool any_alive_in_group(pid_t pgid) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return ::kill(-pgid, 0) == 0;
  bool alive = false;
  while (const dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + entry->d_name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(line.c_str() + close + 2, "%c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') {
      alive = true;
      break;
    }
  }
  ::closedir(proc);
  return alive;
}

}  // namespace

JobProcess::JobProcess(const JobSpec& spec) {
  CLEAVE_CHECK(!spec.argv.empty(), "run: no launcher command");
  int fds[2];
  CLEAVE_CHECK(::pipe(fds) == 0, "run: pipe failed ({})", std::strerror(errno));
  log_ = spec.log_path.empty() ? nullptr : std::fopen(spec.log_path.c_str(), "w");
  CLEAVE_CHECK(spec.log_path.empty() || log_ != nullptr, "run: cannot write the attempt's log {} ({})", spec.log_path,
               std::strerror(errno));
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    for (const auto& name : spec.unset_env) ::unsetenv(name.c_str());
    for (const auto& [name, value] : spec.set_env) ::setenv(name.c_str(), value.c_str(), 1);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGUSR1, SIG_DFL);
    ::execvp(argv[0], argv.data());
    const std::string line = std::string("run: cannot start ") + argv[0] + ": " + std::strerror(errno) + "\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    static_cast<void>(ignored);
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    CLEAVE_THROW("run: fork failed ({})", std::strerror(errno));
  }
  ::setpgid(pid, pid);  // also here: no race with a signal sent before the child ran setpgid
  pid_ = pid;
  fd_ = fds[0];
}

JobProcess::~JobProcess() {
  if (pid_ > 0 && (!exited_ || group_alive())) end_group(1000);
  if (fd_ >= 0) ::close(fd_);
  if (log_ != nullptr) std::fclose(log_);
}

void JobProcess::reap(bool block) {
  if (exited_ || pid_ <= 0) return;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r == pid_) {
    exited_ = true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
}

std::string JobProcess::poll(int timeout_ms) {
  std::string got;
  if (fd_ >= 0) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) > 0) {
      char buffer[65536];
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n > 0) {
        got.assign(buffer, static_cast<std::size_t>(n));
        ssize_t ignored = ::write(STDERR_FILENO, buffer, static_cast<std::size_t>(n));
        static_cast<void>(ignored);
        if (log_ != nullptr) {
          std::fwrite(buffer, 1, static_cast<std::size_t>(n), log_);
          std::fflush(log_);
        }
        output_ += got;
      } else if (n == 0) {  // every writer closed: the launcher and its ranks are gone (or closed their output)
        ::close(fd_);
        fd_ = -1;
      }
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 20)));
  }
  reap(false);
  return got;
}

void JobProcess::signal_launcher(int sig) {
  if (!exited_ && pid_ > 0) ::kill(pid_, sig);
}

bool JobProcess::group_alive() const { return pid_ > 0 && any_alive_in_group(pid_); }

void JobProcess::end_group(int grace_ms) {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGCONT);  // a stopped rank takes SIGTERM only once it runs
  ::kill(-pid_, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (std::chrono::steady_clock::now() < until) {
    poll(10);
    if (exited_ && !group_alive()) return;
  }
  ::kill(-pid_, SIGKILL);
  reap(true);
  // SIGKILL cannot be refused; a process in uninterruptible sleep (D state) may take a moment, not forever.
  for (int i = 0; i < 1000 && group_alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace cleave::supervise
