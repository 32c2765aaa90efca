// Internal to the NCCL backend (engine/comm/nccl): what its files share. NcclCommState is a communicator's NCCL
// handle, stream, MPI mirror and abort state, shared with its Works (a Work may outlive the communicator that posted
// it); NcclWork is one op enqueued on the communicator's stream, completed on the device or polled on the host.
// nccl_communicator.cpp holds the communicator's own calls, nccl_collectives.cpp the collectives.
//
// Invariants: every use of `comm` happens under comm_mutex, so the completions' watchdog thread can abort it at
// any time; a Work keeps every tensor its op reads or writes alive until it is complete or handed to the device
// (its caller's stream then waits for the op); a Work dropped before completion completes it (and aborts the
// job if that fails), so no op outlives its buffers.
// No heap allocation and no CUDA event created per op once a run is warm: a dropped Work goes back to its state's
// pool (NcclWork::take, engine/comm/work_pool.hpp) with its vectors' capacity; its done event comes from the
// state's EventPool and goes back there once it has fired (on the host, or through the watchdog thread); its
// details are plain values (NcclOpDetails), formatted only for an error or a timeout report.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/comm/mpi/watchdog.hpp"
#include "engine/comm/nccl/device_completions.hpp"
#include "engine/comm/nccl/nccl_communicator.hpp"
#include "engine/comm/nccl/op_details.hpp"
#include "engine/comm/nccl/stream_scratch.hpp"
#include "engine/comm/op_parts.hpp"
#include "engine/comm/work_pool.hpp"
#include "engine/cuda/event_pool.hpp"

namespace cleave::comm::detail {

class NcclWork;

struct NcclCommState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // recorded on the caller's stream; the comm stream waits on it
  int* barrier_word = nullptr;  // one device int for barrier()
  // The deterministic reduction's staging, used on `stream` only (under comm_mutex); grown by the first reductions
  // (warm-up), then reused: no allocation in a steady-state step. Released before `stream` is destroyed.
  StreamScratch staging;
  int device = 0;
  int rank = 0;
  int size = 1;
  std::string name;
  NcclOptions options;
  std::unique_ptr<MpiCommunicator> mpi;  // same members: liveness probe, split mirror, abort
  // Serialises the use of `comm` by the driving thread with ncclCommAbort from the completions' watchdog thread
  // (recursive: a timeout report on the driving thread aborts while it holds the lock).
  std::recursive_mutex comm_mutex;
  std::atomic<bool> abort_started{false};
  std::atomic<bool> aborted{false};
  std::string abort_reason;  // written under comm_mutex before `aborted` is set
  bool host_completion = false;                   // every wait() blocks the host (debug mode, see the header)
  ops::HostWaits* host_waits = nullptr;           // the run's counter (count_host_waits), not owned
  std::unique_ptr<DeviceCompletions> completions;  // created by the first op completing on the device
  cuda::EventPool events;                          // the ops' done events, reused (engine/cuda/event_pool.hpp)
  WorkPool<NcclWork> works;                        // finished Works kept for the next ops (NcclWork::take)

  NcclCommState();
  NcclCommState(const NcclCommState&) = delete;
  NcclCommState& operator=(const NcclCommState&) = delete;
  // Finalizes `comm` under the watchdog, aborts it if that fails; frees the staging (on `stream`), the stream,
  // events and barrier word.
  ~NcclCommState();

  // The first caller aborts; a later one (the timeout report on the driving thread while the watchdog thread is
  // still inside ncclCommAbort) returns at once instead of waiting for the lock.
  void abort_comm(const std::string& reason);

  // The watchdog of ops completing on the device, started on first use.
  DeviceCompletions& device_completions();

  // Reports an op that timed out while completing on the device (the watchdog thread has aborted the
  // communicator): the usual timeout report, then MPI_Abort. Called at every entry into the communicator.
  void surface();

  TimeoutContext timeout_context(std::string op, std::string details) const;

  [[noreturn]] void expire(const std::string& op, const std::string& details, double elapsed_s);

  // After a call that may have returned ncclInProgress: poll until the communicator is ready again.
  void wait_ready(ncclComm_t target, std::string_view op);
};

// Completion: posted on a CUDA stream (and not in host-completion mode) the op completes on the device: wait()
// makes the caller's stream wait for the done event and hands the event to the communicator's watchdog
// (DeviceCompletions), without blocking the host. Otherwise wait() polls the event on the host under the
// watchdog, as test() does, and notes one host wait.
class NcclWork final : public Work {
 public:
  using Ptr = std::unique_ptr<NcclWork, WorkRelease>;
  static constexpr std::size_t kReservedTensors = 16;

  // A Work for op `op` (a string literal: kept by pointer) from `state`'s pool, or a new one when none is idle,
  // with a done event from the state's EventPool. Orders the communicator's stream after the work already queued
  // on `stream`; throws if the communicator was aborted. Call with comm_mutex held and the device current.
  static Ptr take(const std::shared_ptr<NcclCommState>& state, const char* op, const Stream& stream);

  // An incomplete Work is completed as wait() would, without counting a host wait: on the device (the caller's
  // stream waits for it) or by polling on the host.
  ~NcclWork() override;

  // What the op is, for the reports (set after take(); the Work's own capacity, no allocation).
  NcclOpDetails& details() { return details_; }
  void keep(const Tensor& t) { keep_.push_back(t); }
  // Marks the end of the op on the communicator's stream.
  void enqueued();

  bool test() override;
  void wait() override;

 protected:
  // Completes the Work if it is not (as the destructor does), gives its event back and the Work to the pool.
  void recycle() noexcept override;

 private:
  NcclWork() { keep_.reserve(kReservedTensors); }
  // The destructor's and recycle()'s completion: an error ends the job (no op may outlive its buffers).
  void finish_before_release() noexcept;
  void poll_until_complete();
  // Device-side completion: the caller's stream waits for the op, the watchdog thread owns the done event from
  // here, and the Work is complete for its caller.
  void hand_off();

  std::shared_ptr<NcclCommState> state_;  // null while idle in the pool
  const char* op_ = "";
  NcclOpDetails details_;
  cudaStream_t caller_ = nullptr;
  bool device_side_ = false;
  std::chrono::steady_clock::time_point posted_;
  cudaEvent_t done_ = nullptr;  // from state_->events while in flight; null once handed to the watchdog
  std::vector<Tensor> keep_;
  bool complete_ = true;  // an idle Work counts as complete
  bool failed_ = false;
};

// A non-blocking communicator's configuration (nccl_communicator.cpp says why non-blocking).
ncclConfig_t non_blocking_config();

// Every dtype but u16 has an NCCL type; u16 is moved as bytes by copy ops and refused by reductions.
inline bool has_nccl_type(DType dtype) { return dtype != DType::kU16; }

ncclDataType_t nccl_type(DType dtype);

inline ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

}  // namespace cleave::comm::detail
