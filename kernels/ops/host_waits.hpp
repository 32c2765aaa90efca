// Host waits of one run: how often the host blocked on the run's device stream through the seam, by kind. The
// GPU's steady-state step is meant to wait a fixed, small number of times (the loss read-back, the gradient
// norm when clipping, check_device_status); a test reads this counter to hold it to that number.
//
// Invariant: every op of ops.hpp marked "(host value)" notes exactly one wait of its kind per call, on every
// backend (the CPU's calls are counted too, though its "waits" cost nothing, so a CPU run shows the number a GPU
// run will make): synchronize (and to_host / to_device, which are a transfer and one synchronize),
// sum_squares, sum_squares_many, count_correct, check_device_status. Counting happens in the seam (ops_*.cpp),
// before the slot runs, through Context::host_waits; a null pointer counts nothing.
//
// Communicators note kCommunication for every host wait on device work when the run hands them this counter
// (Communicator::count_host_waits; the run's grid groups do): the staged world's issue-time and completion
// waits (engine/comm/cuda), NCCL's wait() in host-wait mode (engine/comm/nccl; device-side completion, the
// default on a CUDA stream, does not block the host and counts nothing). Host tensors over MPI are not device
// waits and count nothing, so a CPU run's counts are unchanged.
//
// Not counted, because they wait on another object than the run's context: the caching allocator's
// cudaFree when it returns memory to the system (system_free; a steady-state step makes none, tested by
// gpu_train_test), CUDA event timing (engine/cuda/stream.cpp) and the engine/cuda copy helpers the GPU tests
// use (cuda::copy, cuda::to_host).
//
// One per run, owned by it (train::RankSetup) and reached through the Context; not thread-safe (the ops of a run
// are issued from one thread). No global state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cleave::ops {

enum class HostWait { kSynchronize, kSumSquares, kSumSquaresMany, kCountCorrect, kDeviceStatus, kCommunication };
inline constexpr std::size_t kHostWaitKinds = 6;

const char* host_wait_name(HostWait kind);  // "synchronize", "sum_squares", ..., "communication"

class HostWaits {
 public:
  void note(HostWait kind) { ++counts_[static_cast<std::size_t>(kind)]; }
  std::int64_t count(HostWait kind) const { return counts_[static_cast<std::size_t>(kind)]; }
  std::int64_t total() const;
  // The waits since `earlier` (a copy taken before), kind by kind.
  HostWaits since(const HostWaits& earlier) const;
  // "3 (synchronize 1, sum_squares_many 1, check_device_status 1)": the non-zero kinds in enum order.
  std::string str() const;

 private:
  std::array<std::int64_t, kHostWaitKinds> counts_{};
};

}  // namespace cleave::ops
