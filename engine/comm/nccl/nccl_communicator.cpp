// NCCL backend (nccl_communicator.hpp).
//
// Why non-blocking communicators: with blocking ones, ncclCommInitRank, ncclGroupEnd (connection set-up on
// first use) and ncclCommSplit can wait inside NCCL for a peer that never comes, out of the watchdog's
// reach. Non-blocking ones return ncclInProgress and are polled here, with the timeout.
#include "engine/comm/nccl/nccl_communicator.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "engine/comm/host_reduce.hpp"
#include "engine/comm/mpi/local_rank.hpp"
#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/mpi/watchdog.hpp"
#include "engine/comm/nccl/cuda_check.hpp"
#include "engine/comm/nccl/device_completions.hpp"
#include "engine/comm/nccl/ordered_reduce.hpp"
#include "engine/core/log.hpp"
#include "engine/cuda/device.hpp"
#include "kernels/ops/host_waits.hpp"

namespace cleave::comm {

namespace detail {

struct NcclCommState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // recorded on the caller's stream; the comm stream waits on it
  int* barrier_word = nullptr;  // one device int for barrier()
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

  // The first caller aborts; a later one (the timeout report on the driving thread while the watchdog thread is
  // still inside ncclCommAbort) returns at once instead of waiting for the lock.
  void abort_comm(const std::string& reason) {
    if (abort_started.exchange(true)) return;
    std::lock_guard<std::recursive_mutex> lock(comm_mutex);
    abort_reason = reason;
    aborted = true;
    if (comm != nullptr) ncclCommAbort(comm);
  }

  DeviceCompletions& device_completions() {
    if (completions == nullptr) {
      // Grace for the driving thread to report an expiry: as long as a liveness probe of the peers could take.
      completions = std::make_unique<DeviceCompletions>(device, options.timeout_s, std::max(30.0, options.timeout_s),
                                                        name, [this](const std::string& why) { abort_comm(why); });
    }
    return *completions;
  }

  // Reports an op that timed out while completing on the device (the watchdog thread has aborted the
  // communicator): the usual timeout report, then MPI_Abort. Called at every entry into the communicator.
  void surface() {
    if (completions == nullptr) return;
    if (std::optional<DeviceCompletions::Expired> late = completions->expired()) {
      expire(late->op, late->details + "; the op was completing on the device (its Work's wait() had returned)",
             late->elapsed_s);
    }
  }

  ~NcclCommState() {
    completions.reset();  // stops the watchdog thread before the communicator goes
    cleave::cuda::DeviceGuard guard(device, std::nothrow);
    if (comm != nullptr && !aborted) {
      // Flush outstanding work; a peer that is gone must not hold up the destructor past the timeout.
      ncclResult_t state = ncclCommFinalize(comm);
      PollBackoff backoff;
      while (state == ncclSuccess || state == ncclInProgress) {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress) break;
        if (backoff.elapsed_s() > options.timeout_s) break;
        backoff.pause();
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm);
      } else {
        log::warn("nccl comm '{}': finalize did not complete ({}); aborting it", name, ncclGetErrorString(state));
        ncclCommAbort(comm);
      }
    }
    if (barrier_word != nullptr) cudaFree(barrier_word);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  TimeoutContext timeout_context(std::string op, std::string details) const {
    return {std::move(op), name, mpi->world_ranks(), mpi->probe_ranks(), std::move(details), options.timeout_s};
  }

  [[noreturn]] void expire(const std::string& op, const std::string& details, double elapsed_s) {
    watchdog_expire(*mpi->probe(), timeout_context(op, details), elapsed_s, [this] { abort_comm("watchdog timeout"); });
  }

  // After a call that may have returned ncclInProgress: poll until the communicator is ready again.
  void wait_ready(ncclComm_t target, const std::string& op) {
    ncclResult_t state = ncclInProgress;
    CLEAVE_NCCL_CHECK(ncclCommGetAsyncError(target, &state));
    PollBackoff backoff;
    while (state == ncclInProgress) {
      if (backoff.slow_tick()) {
        mpi->probe()->serve();
        if (backoff.elapsed_s() > options.timeout_s) expire(op, "waiting for NCCL to accept the call", backoff.elapsed_s());
      }
      backoff.pause();
      CLEAVE_NCCL_CHECK(ncclCommGetAsyncError(target, &state));
    }
    if (state != ncclSuccess) {
      const std::string detail = fmt::format("{} on nccl comm '{}': {} ({})", op, name, ncclGetErrorString(state),
                                             ncclGetLastError(target));
      abort_comm(detail);
      throw BackendError(detail);
    }
  }
};

namespace {

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

bool has_nccl_type(DType dtype) { return dtype != DType::kU16; }

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU16: break;
  }
  return ncclInt8;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

char* bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

cudaStream_t caller_stream(const Stream& stream) {
  return stream.device().is_cuda() && stream.native() != nullptr ? static_cast<cudaStream_t>(stream.native())
                                                                   : cudaStreamLegacy;
}

std::int64_t block_begin(std::int64_t count, int n, int b) { return count * b / n; }

// Completion: posted on a CUDA stream (and not in host-completion mode) the op completes on the device: wait()
// makes the caller's stream wait for the done event and hands the event to the communicator's watchdog
// (DeviceCompletions), without blocking the host. Otherwise wait() polls the event on the host under the
// watchdog, as test() does, and notes one host wait.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommState> state, std::string op, std::string details, const Stream& stream)
      : state_(std::move(state)),
        op_(std::move(op)),
        details_(std::move(details)),
        caller_(caller_stream(stream)),
        device_side_(!state_->host_completion && stream.device().is_cuda() && stream.native() != nullptr),
        posted_(std::chrono::steady_clock::now()) {
    state_->surface();
    if (state_->aborted) {
      throw BackendError(fmt::format("{} on nccl comm '{}': the communicator was aborted ({})", op_, state_->name,
                                     state_->abort_reason));
    }
    CLEAVE_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    CLEAVE_CUDA_CHECK(cudaEventRecord(state_->ready, caller_stream(stream)));
    CLEAVE_CUDA_CHECK(cudaStreamWaitEvent(state_->stream, state_->ready, 0));
  }

  // An incomplete Work is completed as wait() would, without counting a host wait: on the device (the caller's
  // stream waits for it) or by polling on the host.
  ~NcclWork() override {
    if (!complete_ && !failed_) {
      try {
        if (device_side_) {
          hand_off();
        } else {
          poll_until_complete();
        }
      } catch (const std::exception& e) {
        log::error("{} on nccl comm '{}' failed while its Work was destroyed: {}", op_, state_->name, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
    if (done_ != nullptr) cudaEventDestroy(done_);
  }

  void keep(const Tensor& t) { keep_.push_back(t); }
  // Marks the end of the op on the communicator's stream.
  void enqueued() { CLEAVE_CUDA_CHECK(cudaEventRecord(done_, state_->stream)); }

  bool test() override {
    if (complete_) return true;
    state_->surface();
    std::lock_guard<std::recursive_mutex> lock(state_->comm_mutex);  // the watchdog thread may abort `comm`
    if (state_->aborted) {
      failed_ = true;
      throw BackendError(fmt::format("{} on nccl comm '{}': the communicator was aborted ({})", op_, state_->name,
                                     state_->abort_reason));
    }
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaSuccess) {
      complete_ = true;
      keep_.clear();
      return true;
    }
    if (status != cudaErrorNotReady) {
      failed_ = true;
      CLEAVE_CUDA_CHECK(status);
    }
    ncclResult_t async = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(state_->comm, &async);
    if (query != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      failed_ = true;
      const ncclResult_t bad = query != ncclSuccess ? query : async;
      const std::string detail = fmt::format("{} on nccl comm '{}' ({}): {} ({})", op_, state_->name, details_,
                                             ncclGetErrorString(bad), ncclGetLastError(state_->comm));
      state_->abort_comm(detail);
      throw BackendError(detail);
    }
    return false;
  }

  void wait() override {
    if (complete_) return;
    if (device_side_) {
      hand_off();
      return;
    }
    if (state_->host_waits != nullptr) state_->host_waits->note(ops::HostWait::kCommunication);
    poll_until_complete();
  }

 private:
  void poll_until_complete() {
    PollBackoff backoff;
    while (!test()) {
      if (backoff.slow_tick()) {
        state_->mpi->probe()->serve();
        if (backoff.elapsed_s() > state_->options.timeout_s) state_->expire(op_, details_, backoff.elapsed_s());
      }
      backoff.pause();
    }
  }

  // Device-side completion: the caller's stream waits for the op, the watchdog thread owns the done event from
  // here, and the Work is complete for its caller. The tensors are released now: the memory may return to an
  // allocator ordered on the caller's stream, whose next use is ordered after the op (communicator.hpp).
  void hand_off() {
    state_->surface();
    if (state_->aborted) {
      failed_ = true;
      throw BackendError(fmt::format("{} on nccl comm '{}': the communicator was aborted ({})", op_, state_->name,
                                     state_->abort_reason));
    }
    CLEAVE_CUDA_CHECK(cudaStreamWaitEvent(caller_, done_, 0));
    state_->device_completions().add(done_, op_, details_, posted_);
    done_ = nullptr;
    keep_.clear();
    complete_ = true;
  }

  std::shared_ptr<NcclCommState> state_;
  std::string op_;
  std::string details_;
  cudaStream_t caller_ = nullptr;
  bool device_side_ = false;
  std::chrono::steady_clock::time_point posted_;
  cudaEvent_t done_ = nullptr;
  std::vector<Tensor> keep_;
  bool complete_ = false;
  bool failed_ = false;
};

std::string describe(const Tensor& t) { return fmt::format("{} {}", t.numel(), dtype_name(t.dtype())); }

// Finishes construction of a state whose comm, mpi companion and device are set.
void init_resources(NcclCommState& s) {
  cleave::cuda::DeviceGuard guard(s.device);
  CLEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  CLEAVE_CUDA_CHECK(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
  CLEAVE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.barrier_word), sizeof(int)));
  CLEAVE_CUDA_CHECK(cudaMemset(s.barrier_word, 0, sizeof(int)));
  s.rank = s.mpi->rank();
  s.size = s.mpi->size();
}

// Rank-ordered reduction of `count` elements of `input` (n blocks [block_begin(q), block_begin(q+1)) when
// `gather` is true, else n equal blocks of `count`) into `out`, all enqueued on the comm stream. With
// gather = true (all_reduce) the results are spread back into every rank's `input` afterwards.
void deterministic_reduce(NcclCommState& s, const std::string& op_name, DType dtype, ReduceOp op, char* input,
                          std::int64_t total, char* out, bool gather) {
  const int n = s.size;
  const int r = s.rank;
  const std::size_t elem = dtype_size(dtype);
  auto begin_of = [&](int q) { return gather ? block_begin(total, n, q) : total / n * q; };
  auto len_of = [&](int q) { return gather ? block_begin(total, n, q + 1) - block_begin(total, n, q) : total / n; };
  const std::int64_t mine = len_of(r);
  void* staging = nullptr;
  CLEAVE_CUDA_CHECK(cudaMallocAsync(&staging, static_cast<std::size_t>(n) * static_cast<std::size_t>(mine) * elem + 1,
                                    s.stream));
  char* slots = static_cast<char*>(staging);
  CLEAVE_CUDA_CHECK(cudaMemcpyAsync(slots + static_cast<std::size_t>(r * mine) * elem,
                                    input + static_cast<std::size_t>(begin_of(r)) * elem,
                                    static_cast<std::size_t>(mine) * elem, cudaMemcpyDeviceToDevice, s.stream));
  CLEAVE_NCCL_CHECK(ncclGroupStart());
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    if (len_of(q) > 0) {
      CLEAVE_NCCL_CHECK(ncclSend(input + static_cast<std::size_t>(begin_of(q)) * elem,
                                 static_cast<std::size_t>(len_of(q)), nccl_type(dtype), q, s.comm, s.stream));
    }
    if (mine > 0) {
      CLEAVE_NCCL_CHECK(ncclRecv(slots + static_cast<std::size_t>(q * mine) * elem, static_cast<std::size_t>(mine),
                                 nccl_type(dtype), q, s.comm, s.stream));
    }
  }
  CLEAVE_NCCL_CHECK(ncclGroupEnd());
  s.wait_ready(s.comm, op_name);
  char* target = gather ? input + static_cast<std::size_t>(begin_of(r)) * elem : out;
  CLEAVE_CUDA_CHECK(ordered_reduce_on_device(dtype, op == ReduceOp::kMax, slots, n, mine, target, mine, s.stream));
  if (gather) {
    CLEAVE_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      if (mine > 0) {
        CLEAVE_NCCL_CHECK(ncclSend(target, static_cast<std::size_t>(mine), nccl_type(dtype), q, s.comm, s.stream));
      }
      if (len_of(q) > 0) {
        CLEAVE_NCCL_CHECK(ncclRecv(input + static_cast<std::size_t>(begin_of(q)) * elem,
                                   static_cast<std::size_t>(len_of(q)), nccl_type(dtype), q, s.comm, s.stream));
      }
    }
    CLEAVE_NCCL_CHECK(ncclGroupEnd());
    s.wait_ready(s.comm, op_name);
  }
  CLEAVE_CUDA_CHECK(cudaFreeAsync(staging, s.stream));
}

}  // namespace
}  // namespace detail

using detail::NcclCommState;
using detail::NcclWork;

NcclCommunicator::NcclCommunicator(MpiCommunicator& bootstrap, const NcclOptions& options) {
  auto state = std::make_shared<NcclCommState>();
  state->options = options;
  const char* host_wait = std::getenv("CLEAVE_NCCL_HOST_WAIT");
  state->host_completion = options.host_completion || (host_wait != nullptr && std::strcmp(host_wait, "1") == 0);
  state->name = bootstrap.name();
  // A private MPI group with the same members, sharing the bootstrap's liveness probe.
  std::unique_ptr<Communicator> mirror = bootstrap.split(0, bootstrap.rank(), "nccl");
  state->mpi.reset(static_cast<MpiCommunicator*>(mirror.release()));
  int device_count = 0;
  const cudaError_t count_status = cudaGetDeviceCount(&device_count);
  if (count_status != cudaSuccess) device_count = 0;
  if (options.device >= 0) {
    CLEAVE_CHECK(options.device < device_count, "nccl comm '{}': device cuda:{} requested but {} device(s) visible",
                 state->name, options.device, device_count);
    state->device = options.device;
  } else {
    const LocalRank local = detect_local_rank(*state->mpi);
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    state->device = select_device(local, device_count, host_name(), visible != nullptr ? visible : "(unset)");
  }
  detail::init_resources(*state);
  ncclUniqueId id{};
  if (state->rank == 0) CLEAVE_NCCL_CHECK(ncclGetUniqueId(&id));
  state->mpi->guarded_barrier("nccl unique id broadcast");
  CLEAVE_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, state->mpi->native()));
  {
    cleave::cuda::DeviceGuard guard(state->device);
    ncclConfig_t config = detail::non_blocking_config();
    CLEAVE_NCCL_CHECK(ncclCommInitRankConfig(&state->comm, state->size, id, state->rank, &config));
    state->wait_ready(state->comm, "ncclCommInitRankConfig");
  }
  state_ = std::move(state);
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclCommState> state) : state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return state_->rank; }
int NcclCommunicator::size() const { return state_->size; }
const std::string& NcclCommunicator::name() const { return state_->name; }
const std::vector<int>& NcclCommunicator::world_ranks() const { return state_->mpi->world_ranks(); }
const CommOptions& NcclCommunicator::options() const { return state_->options; }
int NcclCommunicator::device() const { return state_->device; }
cudaStream_t NcclCommunicator::stream() const { return state_->stream; }
ncclComm_t NcclCommunicator::native() const { return state_->comm; }

void NcclCommunicator::check_device(const Tensor& t, std::string_view op) const {
  CLEAVE_CHECK(t.device() == Device::cuda(state_->device),
               "{}: tensor is on {} but this communicator drives cuda:{}; the NCCL backend carries tensors of its "
               "own device (use the mpi backend for CPU tensors)",
               where(op), t.device().str(), state_->device);
}

bool NcclCommunicator::completes_on_device() const { return !state_->host_completion; }

std::size_t NcclCommunicator::outstanding_device_works() const {
  return state_->completions != nullptr ? state_->completions->outstanding() : 0;
}

void NcclCommunicator::count_host_waits(ops::HostWaits* waits) { state_->host_waits = waits; }

void NcclCommunicator::abort(const std::string& reason) {
  state_->abort_comm(reason);
  state_->mpi->abort(reason);
}

std::unique_ptr<Communicator> NcclCommunicator::split_impl(int color, int key, std::string name) {
  NcclCommState& s = *state_;
  s.surface();
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  CLEAVE_CHECK(!s.aborted, "{}: the communicator was aborted ({})", where("split"), s.abort_reason);
  std::unique_ptr<Communicator> mirror = s.mpi->split(color, key, "nccl");
  cleave::cuda::DeviceGuard guard(s.device);
  ncclConfig_t config = detail::non_blocking_config();
  ncclComm_t child = nullptr;
  CLEAVE_NCCL_CHECK(ncclCommSplit(s.comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config));
  s.wait_ready(s.comm, "ncclCommSplit");
  if (child == nullptr) return nullptr;
  auto state = std::make_shared<NcclCommState>();
  state->options = s.options;
  state->host_completion = s.host_completion;
  state->name = std::move(name);
  state->device = s.device;
  state->comm = child;
  state->mpi.reset(static_cast<MpiCommunicator*>(mirror.release()));
  CLEAVE_ASSERT(state->mpi != nullptr, "ncclCommSplit gave a communicator where MPI_Comm_split gave none");
  state->wait_ready(child, "ncclCommSplit (new communicator)");
  detail::init_resources(*state);
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(state)));
}

// Host control tensors (the trainer's loss sums, metadata, counters) travel over the MPI mirror: it has the same
// members with the same ranks (s.rank = s.mpi->rank(), splits mirrored with the same color and key), and NCCL
// carries only device tensors. A collective mixing a host and a device tensor is still refused by check_device.
WorkPtr NcclCommunicator::all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  state_->surface();
  if (tensor.device().is_cpu()) return state_->mpi->all_reduce(tensor, op);
  check_device(tensor, "all_reduce");
  CLEAVE_CHECK(detail::has_nccl_type(tensor.dtype()),
               "{}: NCCL has no {} type to reduce (cast to i32, or reduce on the CPU with the mpi backend)",
               where("all_reduce"), dtype_name(tensor.dtype()));
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  auto work = std::make_unique<NcclWork>(state_, "all_reduce",
                                         fmt::format("{}, {}", detail::describe(tensor), reduce_op_name(op)), stream);
  work->keep(tensor);
  if (s.options.deterministic && is_floating(tensor.dtype()) && s.size > 1) {
    detail::deterministic_reduce(s, "all_reduce", tensor.dtype(), op, detail::bytes(tensor), tensor.numel(), nullptr,
                                 true);
  } else {
    CLEAVE_NCCL_CHECK(ncclAllReduce(tensor.raw_data(), tensor.raw_data(), static_cast<std::size_t>(tensor.numel()),
                                    detail::nccl_type(tensor.dtype()), detail::nccl_op(op), s.comm, s.stream));
    s.wait_ready(s.comm, "all_reduce");
  }
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                                              const Stream& stream) {
  state_->surface();
  if (input.device().is_cpu() && output.device().is_cpu()) return state_->mpi->reduce_scatter(input, output, op);
  check_device(input, "reduce_scatter");
  check_device(output, "reduce_scatter");
  CLEAVE_CHECK(detail::has_nccl_type(input.dtype()),
               "{}: NCCL has no {} type to reduce (cast to i32, or reduce on the CPU with the mpi backend)",
               where("reduce_scatter"), dtype_name(input.dtype()));
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  auto work = std::make_unique<NcclWork>(
      state_, "reduce_scatter", fmt::format("{} per rank, {}", detail::describe(output), reduce_op_name(op)), stream);
  work->keep(input);
  work->keep(output);
  if (s.options.deterministic && is_floating(input.dtype()) && s.size > 1) {
    detail::deterministic_reduce(s, "reduce_scatter", input.dtype(), op, detail::bytes(input), input.numel(),
                                 detail::bytes(output), false);
  } else {
    // NCCL's in-place form is exactly ours: output == input + rank * count.
    CLEAVE_NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(), static_cast<std::size_t>(output.numel()),
                                        detail::nccl_type(input.dtype()), detail::nccl_op(op), s.comm, s.stream));
    s.wait_ready(s.comm, "reduce_scatter");
  }
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) {
  state_->surface();
  if (input.device().is_cpu() && output.device().is_cpu()) return state_->mpi->all_gather(input, output);
  check_device(input, "all_gather");
  check_device(output, "all_gather");
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  auto work = std::make_unique<NcclWork>(state_, "all_gather",
                                         fmt::format("{} per rank", detail::describe(input)), stream);
  work->keep(input);
  work->keep(output);
  // Moved as bytes (u16 has no NCCL type); in place when input == output + rank * count, as NCCL allows.
  CLEAVE_NCCL_CHECK(ncclAllGather(input.raw_data(), output.raw_data(), input.nbytes(), ncclInt8, s.comm, s.stream));
  s.wait_ready(s.comm, "all_gather");
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::broadcast_impl(const Tensor& tensor, int root, const Stream& stream) {
  state_->surface();
  if (tensor.device().is_cpu()) return state_->mpi->broadcast(tensor, root);
  check_device(tensor, "broadcast");
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  auto work = std::make_unique<NcclWork>(state_, "broadcast",
                                         fmt::format("{}, root rank {}", detail::describe(tensor), root), stream);
  work->keep(tensor);
  CLEAVE_NCCL_CHECK(
      ncclBroadcast(tensor.raw_data(), tensor.raw_data(), tensor.nbytes(), ncclInt8, root, s.comm, s.stream));
  s.wait_ready(s.comm, "broadcast");
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::barrier_impl(const Stream& stream) {
  state_->surface();
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  auto work = std::make_unique<NcclWork>(state_, "barrier", "", stream);
  CLEAVE_NCCL_CHECK(ncclAllReduce(s.barrier_word, s.barrier_word, 1, ncclInt32, ncclSum, s.comm, s.stream));
  s.wait_ready(s.comm, "barrier");
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::batch_p2p_impl(std::vector<P2POp> ops, const Stream& stream) {
  state_->surface();
  for (const P2POp& op : ops) check_device(op.tensor, "batch_p2p");
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  std::string details = fmt::format("{} ops:", ops.size());
  for (const P2POp& op : ops) {
    details += fmt::format(" {} rank {} (world {}) ({}),", op.kind == P2PKind::kSend ? "send to" : "recv from",
                           op.peer, s.mpi->world_ranks()[static_cast<std::size_t>(op.peer)],
                           detail::describe(op.tensor));
  }
  details.pop_back();
  auto work = std::make_unique<NcclWork>(state_, "batch_p2p", details, stream);
  CLEAVE_NCCL_CHECK(ncclGroupStart());
  for (const P2POp& op : ops) {
    work->keep(op.tensor);
    if (op.kind == P2PKind::kSend) {
      CLEAVE_NCCL_CHECK(ncclSend(op.tensor.raw_data(), op.tensor.nbytes(), ncclInt8, op.peer, s.comm, s.stream));
    } else {
      CLEAVE_NCCL_CHECK(ncclRecv(op.tensor.raw_data(), op.tensor.nbytes(), ncclInt8, op.peer, s.comm, s.stream));
    }
  }
  CLEAVE_NCCL_CHECK(ncclGroupEnd());
  s.wait_ready(s.comm, "batch_p2p");
  work->enqueued();
  return work;
}

}  // namespace cleave::comm
