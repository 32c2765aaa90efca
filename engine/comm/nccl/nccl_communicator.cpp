// NCCL backend (nccl_communicator.hpp): the communicator's construction, accessors, split, barrier and batched
// point-to-point; the collectives are in nccl_collectives.cpp, and what both share (the state, NcclWork) in
// nccl_work.hpp. Invariant: every call that may return ncclInProgress is polled under the watchdog, so a missing
// peer ends in a timeout, not a hang.
//
// Why non-blocking communicators: with blocking ones, ncclCommInitRank, ncclGroupEnd (connection set-up on
// first use) and ncclCommSplit can wait inside NCCL for a peer that never comes, out of the watchdog's
// reach. Non-blocking ones return ncclInProgress and are polled here, with the timeout.
#include "engine/comm/nccl/nccl_communicator.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "engine/comm/mpi/local_rank.hpp"
#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/nccl/cuda_check.hpp"
#include "engine/comm/nccl/nccl_group.hpp"
#include "engine/comm/nccl/nccl_work.hpp"
#include "engine/cuda/device.hpp"

namespace cleave::comm {
namespace detail {
namespace {

// Finishes construction of a state whose comm, mpi companion and device are set.
void init_resources(NcclCommState& s) {
  cleave::cuda::DeviceGuard guard(s.device);
  CLEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  CLEAVE_CUDA_CHECK(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
  CLEAVE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.barrier_word), sizeof(int)));
  // On the communicator's stream, which every barrier's all-reduce of the word follows (a cudaMemset would run on
  // the legacy default stream, which a non-blocking stream does not wait for).
  CLEAVE_CUDA_CHECK(cudaMemsetAsync(s.barrier_word, 0, sizeof(int), s.stream));
  s.rank = s.mpi->rank();
  s.size = s.mpi->size();
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
    // The world's local rank (make_world_communicator resolved it once), else resolved here by the same rule.
    const LocalRank local =
        options.local_rank >= 0 ? LocalRank{options.local_rank, 0, "options"} : detect_local_rank(*state->mpi);
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

NcclStagingStats NcclCommunicator::staging_stats() const {
  std::lock_guard<std::recursive_mutex> lock(state_->comm_mutex);
  const detail::StreamScratchStats stats = state_->staging.stats();
  return {stats.capacity_bytes, stats.growths};
}

NcclPoolStats NcclCommunicator::pool_stats() const {
  std::lock_guard<std::recursive_mutex> lock(state_->comm_mutex);
  return {state_->works.made(), state_->events.made()};
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

WorkPtr NcclCommunicator::barrier_impl(const Stream& stream) {
  state_->surface();
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  NcclWork::Ptr work = NcclWork::take(state_, "barrier", stream);
  CLEAVE_NCCL_CHECK(ncclAllReduce(s.barrier_word, s.barrier_word, 1, ncclInt32, ncclSum, s.comm, s.stream));
  s.wait_ready(s.comm, "barrier");
  work->enqueued();
  return work;
}

WorkPtr NcclCommunicator::batch_p2p_impl(std::span<const P2POp> ops, const Stream& stream) {
  state_->surface();
  for (const P2POp& op : ops) check_device(op.tensor, "batch_p2p");
  NcclCommState& s = *state_;
  std::lock_guard<std::recursive_mutex> lock(s.comm_mutex);
  cleave::cuda::DeviceGuard guard(s.device);
  NcclWork::Ptr work = NcclWork::take(state_, "batch_p2p", stream);
  const std::vector<int>& world = s.mpi->world_ranks();
  detail::NcclGroup group;
  for (const P2POp& op : ops) {
    work->details().add_peer(op.kind == P2PKind::kSend, op.peer, world[static_cast<std::size_t>(op.peer)], op.tensor);
    work->keep(op.tensor);
    if (op.kind == P2PKind::kSend) {
      CLEAVE_NCCL_CHECK(ncclSend(op.tensor.raw_data(), op.tensor.nbytes(), ncclInt8, op.peer, s.comm, s.stream));
    } else {
      CLEAVE_NCCL_CHECK(ncclRecv(op.tensor.raw_data(), op.tensor.nbytes(), ncclInt8, op.peer, s.comm, s.stream));
    }
  }
  group.end();
  s.wait_ready(s.comm, "batch_p2p");
  work->enqueued();
  return work;
}

}  // namespace cleave::comm
