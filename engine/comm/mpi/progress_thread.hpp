// ProgressThread: moves a process's outstanding MPI transfers forward while its main thread computes.
//
// Why: MPI libraries move large messages only inside MPI calls. With Open MPI's shared-memory transport and
// btl_vader_single_copy_mechanism=none (what container users and our CI run with), a message above the 4 KiB
// eager limit goes as a rendezvous plus copy-in/copy-out fragments, and each step needs the *sender* (and for
// the rendezvous, the receiver) to be inside MPI. The pipeline executor posts a non-blocking send and then
// computes its next action for milliseconds without entering MPI, so the receiving rank waited a whole peer
// action (ZB-V trace gaps of 14-19 ms; zero-bubble schedules slower than 1F1B).
//
// Design: one thread per process, shared by a root MpiCommunicator and every communicator split from it (as
// the liveness probe is). While at least one MpiWork is outstanding it calls MPI_Iprobe on a private
// duplicate of MPI_COMM_SELF (an Iprobe that matches nothing runs the library's progress engine, Open MPI's
// opal_progress, which advances every pending transfer and non-blocking collective of every communicator);
// while none is, it blocks on a condition variable and costs nothing. Pauses between polls: `min_interval`
// after a new Work starts (its protocol steps, rendezvous, acknowledgement, fragments, follow each other
// closely), doubling up to `max_interval`. The pipeline executor tests its Works after every action, so a
// Work counted as outstanding is one really in flight (or a receive posted ahead of its data); the thread
// shares its rank's core, so every poll is time taken from compute.
//
// Chosen by measurement (`cleave bench`, pp2 GPT d256 x 4 layers, 8 micro-batches, 2 ranks on 2 cores, single
// copy none). First version: polls 100 us -> 2 ms, Works tested only at the end of a step (so nearly always
// "outstanding"); zb_v went from 1,700-4,100 tok/s without the thread to 4,300-5,860 with it; yield-polling
// (2,090) or 20 us polls (3,250) took too much compute. Then the bench's replay (each action at its measured
// duration) showed what was left: a tensor became usable a median 0.1-0.5 ms (p90 1.5-2.3 ms) after both its
// send and its receiver were ready, because a thread had backed off to 2 ms while its message still needed it.
// Four interleaved runs of 5 schedules (mean / p90 of that delay per message): as before 0.17-0.85 / 0.32-2.33
// ms; 50 us -> 200 us with Works tested after each action 0.13-0.24 / 0.24-0.58. But polls cost compute: in
// 1F1B / ZB-H1 / ZB-V triples run back to back (6 per policy; per-triple gains scatter by +-10 points on this
// shared machine), zero-bubble compute per micro-batch over 1F1B's was 0.97-1.00 with the first version, 0.99-
// 1.06 at 50 -> 200 us and 0.99-1.01 at 100 us -> 1 ms; gains over 1F1B (ZB-H1, ZB-V) +10.3% / +6.0%, +0.8% /
// +14.4% and +4.9% / +11.2%. 100 us -> 1 ms (Works tested after each action) is the default: both schedules
// ahead of 1F1B and each measured gain within 0.1 points of the simulated one.
// Not chosen (reasoned, not measured): polls from the executor between actions are what already happens (the
// stall is inside one action, and ZB-V at pp2 has one layer per chunk, so per-layer polls would be no finer);
// cutting messages into eager-sized pieces still needs the sender's progress once the peer's eager buffers
// are full, and multiplies per-message costs.
//
// Invariants:
//  - It never tests or waits on a Work's requests (MPI makes two threads completing one request erroneous):
//    completion, continuations, the watchdog and error reporting stay on the thread that drives the Work. It
//    changes when bytes move, never which bytes, so every result is bit-identical with and without it.
//  - MPI calls from two threads at once need MPI_THREAD_MULTIPLE; MpiRuntime asks for it, and the caller
//    builds a ProgressThread only where it was granted (progress_thread_wanted).
//  - No allocation after construction: work_started/work_finished are an atomic counter plus, on 0 -> 1, a
//    notify under a mutex.
//  - No MPI call while no Work is outstanding, and the destructor stops and joins the thread at once (its
//    pauses are waits on the condition variable, which the destructor notifies). Communicators end before
//    MPI_Finalize (mpi_runtime.hpp), so the thread never outlives MPI. It blocks every signal, so handlers
//    (wait_notice.hpp) run on the application's threads.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>

#include "engine/comm/p2p_progress.hpp"

namespace cleave::comm {

// parallel.p2p_progress: P2PProgress (engine/comm/p2p_progress.hpp).

// Whether large messages between this job's ranks move without the sender's help: Open MPI (its launcher set
// OMPI_COMM_WORLD_SIZE), every rank on one node (OMPI_COMM_WORLD_LOCAL_SIZE equals it) and a shared-memory
// single-copy mechanism (OMPI_MCA_btl_vader_single_copy_mechanism / btl_sm_..., unset = Open MPI's default,
// which is one, or a value other than "none"): the receiver then copies from the sender's memory inside its
// own wait. False wherever it cannot tell (another MPI, several nodes, copy-in/copy-out). `getenv` reads one
// variable (null when unset).
bool single_copy_transport(const std::function<const char*(const char*)>& getenv);

// Whether a root communicator of `size` ranks runs a progress thread: kAuto where MPI_THREAD_MULTIPLE is
// granted, there are peers and the transport is not single copy (there the thread only costs compute: its
// polls took 7-10% of the zero-bubble schedules' compute in `cleave bench` with CMA). Throws Error (naming
// parallel.p2p_progress and both thread levels) for kThread when MPI_THREAD_MULTIPLE is not provided.
bool progress_thread_wanted(P2PProgress mode, bool thread_multiple, int size, bool single_copy = false);

class ProgressThread {
 public:
  // Starts the thread (idle until a Work is outstanding). Local, not collective.
  // Polls every `min_interval` after a Work starts, doubling the pause after each poll up to `max_interval`.
  ProgressThread(std::chrono::microseconds min_interval, std::chrono::microseconds max_interval);
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // One more / one fewer outstanding Work (any thread that drives communicators).
  void work_started();
  void work_finished();

  // Times the thread has entered MPI to drive progress (for tests and reports).
  std::uint64_t polls() const { return polls_.load(std::memory_order_relaxed); }

 private:
  void run();

  std::chrono::microseconds min_interval_;
  std::chrono::microseconds max_interval_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // private duplicate of MPI_COMM_SELF: the Iprobe never matches user traffic
  std::atomic<int> outstanding_{0};
  std::atomic<std::uint64_t> started_{0};  // Works started so far: a new one resets the pause to min_interval
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> polls_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;  // last: starts once everything above exists
};

// Marks one Work outstanding for a ProgressThread (which may be null) from construction until release() or
// destruction.
class ProgressTicket {
 public:
  ProgressTicket() = default;
  explicit ProgressTicket(ProgressThread* thread) : thread_(thread) {
    if (thread_ != nullptr) thread_->work_started();
  }
  ~ProgressTicket() { release(); }
  ProgressTicket(const ProgressTicket&) = delete;
  ProgressTicket& operator=(const ProgressTicket&) = delete;
  void release() {
    if (thread_ != nullptr) thread_->work_finished();
    thread_ = nullptr;
  }
  // Outstanding again (a reused Work's next op).
  void start(ProgressThread* thread) {
    release();
    thread_ = thread;
    if (thread_ != nullptr) thread_->work_started();
  }

 private:
  ProgressThread* thread_ = nullptr;
};

}  // namespace cleave::comm
