// Wait notices and the SIGTERM report (wait_notice.hpp).
#include "engine/comm/mpi/wait_notice.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace cleave::comm {
namespace {

constexpr std::size_t kLineBytes = 1024;

// See the header for why this is static: the SIGTERM handler can reach nothing else.
char g_lines[2][kLineBytes];
std::size_t g_lengths[2] = {0, 0};
std::atomic<int> g_current{-1};  // index of the published line, -1 = not waiting
std::atomic<bool> g_installed{false};

void on_sigterm(int signal_number) {
  const int current = g_current.load();
  if (current >= 0) {
    ssize_t ignored = ::write(STDERR_FILENO, g_lines[current], g_lengths[current]);
    static_cast<void>(ignored);
  }
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

}  // namespace

void report_waits_on_sigterm() {
  if (g_installed.exchange(true)) return;
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
}

void withdraw_wait_notice() { g_current.store(-1); }

void WaitNotice::publish(std::string_view line) {
  const int slot = g_current.load() == 0 ? 1 : 0;  // the buffer the handler is not reading
  const std::size_t n = std::min(line.size(), kLineBytes - 1);
  std::memcpy(g_lines[slot], line.data(), n);
  g_lines[slot][n] = '\n';
  g_lengths[slot] = n + 1;
  g_current.store(slot);
  slot_ = slot;
}

WaitNotice::~WaitNotice() {
  if (slot_ < 0) return;
  int expected = slot_;
  g_current.compare_exchange_strong(expected, -1);
}

}  // namespace cleave::comm
