// The save-and-stop signal (stop_request.hpp).
#include "engine/train/stop_request.hpp"

#include <signal.h>

#include <atomic>

namespace cleave::train {
namespace {

std::atomic<bool> g_stop{false};  // static by necessity: the handler reaches nothing else (header)
std::atomic<bool> g_installed{false};

void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

void install_stop_request_handler() {
  if (g_installed.exchange(true)) return;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, nullptr);
}

bool stop_requested() { return g_stop.load(); }

}  // namespace cleave::train
