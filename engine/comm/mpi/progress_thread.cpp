// Progress thread (progress_thread.hpp).
#include "engine/comm/mpi/progress_thread.hpp"

#include <pthread.h>

#include <algorithm>
#include <csignal>

#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/core/error.hpp"
#include "engine/core/log.hpp"

namespace cleave::comm {

bool single_copy_transport(const std::function<const char*(const char*)>& getenv) {
  const char* world = getenv("OMPI_COMM_WORLD_SIZE");
  const char* local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (world == nullptr || local == nullptr || std::string_view(world) != std::string_view(local)) return false;
  for (const char* name : {"OMPI_MCA_btl_vader_single_copy_mechanism", "OMPI_MCA_btl_sm_single_copy_mechanism"}) {
    const char* value = getenv(name);
    if (value != nullptr && std::string_view(value) == "none") return false;
  }
  return true;
}

bool progress_thread_wanted(P2PProgress mode, bool thread_multiple, int size, bool single_copy) {
  switch (mode) {
    case P2PProgress::kOff: return false;
    case P2PProgress::kAuto: return thread_multiple && size > 1 && !single_copy;
    case P2PProgress::kThread:
      CLEAVE_CHECK(thread_multiple,
                   "parallel.p2p_progress \"thread\" needs MPI_THREAD_MULTIPLE, but the MPI library provides less "
                   "(MPI_THREAD_SERIALIZED or below): use an MPI built with thread support (Open MPI: "
                   "--enable-mpi-thread-multiple, the default since 3.0), or set parallel.p2p_progress to \"auto\" "
                   "(runs without the thread where MPI does not allow it) or \"off\"");
      return true;
  }
  return false;
}

ProgressThread::ProgressThread(std::chrono::microseconds min_interval, std::chrono::microseconds max_interval)
    : min_interval_(min_interval), max_interval_(max_interval) {
  CLEAVE_CHECK(min_interval.count() > 0 && max_interval >= min_interval,
               "progress thread: poll intervals must satisfy 0 < min ({} us) <= max ({} us)", min_interval.count(),
               max_interval.count());
  CLEAVE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &comm_));
  CLEAVE_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  thread_ = std::thread([this] { run(); });
}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void ProgressThread::work_started() {
  started_.fetch_add(1, std::memory_order_relaxed);
  if (outstanding_.fetch_add(1, std::memory_order_acq_rel) == 0) {
    // Under the mutex, so the notify cannot fall between the thread's check and its wait.
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_one();
  }
}

void ProgressThread::work_finished() {
  const int before = outstanding_.fetch_sub(1, std::memory_order_acq_rel);
  CLEAVE_ASSERT(before > 0, "progress thread: more Works finished than started");
}

void ProgressThread::run() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] {
      return stop_.load(std::memory_order_acquire) || outstanding_.load(std::memory_order_acquire) > 0;
    });
    if (stop_.load(std::memory_order_acquire)) return;
    lock.unlock();
    std::uint64_t seen = ~std::uint64_t{0};
    std::chrono::microseconds pause = min_interval_;
    while (outstanding_.load(std::memory_order_acquire) > 0 && !stop_.load(std::memory_order_acquire)) {
      int flag = 0;
      const int rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
      polls_.fetch_add(1, std::memory_order_relaxed);
      if (rc != MPI_SUCCESS) {
        // Progress is an optimisation: without it transfers still complete inside the owners' waits, and any
        // real failure surfaces there. Say so once and stop polling.
        log::warn("progress thread: MPI_Iprobe failed ({}); continuing without background progress",
                  mpi_error_string(rc));
        lock.lock();
        wake_.wait(lock, [this] { return stop_.load(std::memory_order_acquire); });
        return;
      }
      // A fresh Work has protocol steps ahead (rendezvous, acknowledgement, fragments) that should follow each
      // other closely; one that has been outstanding for a while is usually complete and only not yet tested by
      // its owner, so the pause grows.
      const std::uint64_t started = started_.load(std::memory_order_relaxed);
      pause = started != seen ? min_interval_ : std::min(pause * 2, max_interval_);
      seen = started;
      lock.lock();
      if (wake_.wait_for(lock, pause, [this] { return stop_.load(std::memory_order_acquire); })) return;
      lock.unlock();
    }
    lock.lock();
  }
}

}  // namespace cleave::comm
