// Wait notices: what a rank is blocked in, printed when the launcher terminates it.
//
// When one rank of a job dies (SIGKILL, a crash), Open MPI's launcher ends the job at once: it sends the
// surviving ranks SIGTERM and, a second later (odls_base_sigkill_timeout), SIGKILL — usually long before
// their watchdog (train.comm_timeout_s) would fire. Without a notice the survivors vanish silently and the
// user learns only which rank died, not what the others were waiting for. So Work::wait publishes a one-line
// description of the operation (op, communicator, members, pending peers) once it has waited a little
// (kPublishAfter), and a SIGTERM handler writes the published line before the rank terminates:
//   [rank 0/2] terminated by SIGTERM (the launcher is ending the job; another rank failed?) while waiting in
//   batch_p2p on comm 'world/pp' = world ranks [0,1] (2 ops; pending: recv from rank 1 (world 1) tag 3 ...)
//
// Process-wide state, deliberately: a signal handler can only reach static storage. It holds text only
// (two fixed buffers and an atomic index, so the handler never reads a half-written line), carries no
// communication state, and nothing reads it but the handler. The handler uses only write(2), signal(2)
// and raise(3), which are async-signal-safe.
#pragma once

#include <chrono>
#include <string_view>

namespace cleave::comm {

// A wait shorter than this is not worth a notice (and costs no formatting).
inline constexpr std::chrono::milliseconds kPublishAfter{5};

// Installs the SIGTERM handler (idempotent). cleave's commands call it once MPI is up.
void report_waits_on_sigterm();

// The rank is ending the job itself (watchdog timeout, an error): its own report says more than a notice.
void withdraw_wait_notice();

// RAII: publish() sets the process's current wait line; the destructor clears it if it is still ours.
class WaitNotice {
 public:
  WaitNotice() = default;
  ~WaitNotice();
  WaitNotice(const WaitNotice&) = delete;
  WaitNotice& operator=(const WaitNotice&) = delete;

  void publish(std::string_view line);  // truncated to the buffer (1 KiB) if longer
  bool published() const { return slot_ >= 0; }

 private:
  int slot_ = -1;
};

}  // namespace cleave::comm
