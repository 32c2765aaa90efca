// MPI backend (mpi_communicator.hpp): the communicator's construction, accessors, split, barrier and batched
// point-to-point; the collectives are in mpi_collectives.cpp, and what both share (the state, MpiWork) in
// mpi_work.hpp. Invariant: every op returns a Work at once, having posted only non-blocking MPI calls; the blocking
// calls (MPI_Comm_split) come after a guarded barrier, so a missing peer ends in a timeout, not a hang.
#include "engine/comm/mpi/mpi_communicator.hpp"

#include <cstdio>
#include <cstdlib>

#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/mpi/mpi_work.hpp"
#include "engine/comm/mpi/wait_notice.hpp"

namespace cleave::comm {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("unknown MPI error {}", code);
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  return fmt::format("{} (class {})", std::string(text, static_cast<std::size_t>(length)), error_class);
}

using detail::MpiCommState;
using detail::MpiWork;

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const MpiOptions& options, std::string name) {
  MPI_Comm owned = MPI_COMM_NULL;
  CLEAVE_MPI_CHECK(MPI_Comm_dup(comm, &owned));
  auto probe = std::make_shared<LivenessProbe>(comm);
  int size = 1;
  CLEAVE_MPI_CHECK(MPI_Comm_size(comm, &size));
  int provided = MPI_THREAD_SINGLE;
  CLEAVE_MPI_CHECK(MPI_Query_thread(&provided));
  std::shared_ptr<ProgressThread> progress;
  if (progress_thread_wanted(options.progress, provided >= MPI_THREAD_MULTIPLE, size,
                             single_copy_transport([](const char* name) { return std::getenv(name); }))) {
    progress = std::make_shared<ProgressThread>(options.progress_min_interval, options.progress_max_interval);
  }
  state_ = detail::make_state(owned, options, std::move(name), std::move(probe), std::move(progress));
}

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiCommState> state) : state_(std::move(state)) {}

MpiCommunicator::~MpiCommunicator() = default;

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }
const std::string& MpiCommunicator::name() const { return state_->name; }
const std::vector<int>& MpiCommunicator::world_ranks() const { return state_->world_ranks; }
const CommOptions& MpiCommunicator::options() const { return state_->options; }
const MpiOptions& MpiCommunicator::mpi_options() const { return state_->options; }
MPI_Comm MpiCommunicator::native() const { return state_->comm; }
const std::shared_ptr<LivenessProbe>& MpiCommunicator::probe() const { return state_->probe; }
const std::vector<int>& MpiCommunicator::probe_ranks() const { return state_->probe_ranks; }
const ProgressThread* MpiCommunicator::progress_thread() const { return state_->progress.get(); }

bool MpiCommunicator::sends_progress_on_their_own() const {
  return state_->progress != nullptr || state_->single_copy;
}

void MpiCommunicator::check_cpu(const Tensor& t, std::string_view op) const {
  CLEAVE_CHECK(t.device().is_cpu(),
               "{}: tensor is on {}; the MPI backend carries CPU tensors only (CUDA-aware MPI is not assumed): for GPU "
               "tensors wrap it in comm::StagedCommunicator (engine/comm/cuda, stages through pinned host memory) "
               "or use the nccl backend",
               where(op), t.device().str());
}

void MpiCommunicator::guarded_barrier(const char* op) const {
  auto work = MpiWork::take(state_, op);
  work->details("barrier before a blocking MPI call");
  MPI_Request request = MPI_REQUEST_NULL;
  CLEAVE_MPI_CHECK(MPI_Ibarrier(state_->comm, &request));
  work->add(request);
  work->wait();
}

void MpiCommunicator::abort(const std::string& reason) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string line = fmt::format("[rank {}/{}] {} (comm '{}')\n", rank, size, reason, state_->name);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  withdraw_wait_notice();
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

std::unique_ptr<Communicator> MpiCommunicator::split_impl(int color, int key, std::string name) {
  guarded_barrier("split");
  MPI_Comm child = MPI_COMM_NULL;
  CLEAVE_MPI_CHECK(MPI_Comm_split(state_->comm, color < 0 ? MPI_UNDEFINED : color, key, &child));
  if (child == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<Communicator>(new MpiCommunicator(
      detail::make_state(child, state_->options, std::move(name), state_->probe, state_->progress)));
}

WorkPtr MpiCommunicator::barrier_impl(const Stream& stream) {
  (void)stream;
  auto work = MpiWork::take(state_, "barrier");
  MPI_Request request = MPI_REQUEST_NULL;
  CLEAVE_MPI_CHECK(MPI_Ibarrier(state_->comm, &request));
  work->add(request);
  return work;
}

WorkPtr MpiCommunicator::batch_p2p_impl(std::span<const P2POp> ops, const Stream& stream) {
  (void)stream;
  MpiCommState& s = *state_;
  for (const P2POp& op : ops) {
    check_cpu(op.tensor, "batch_p2p");
    CLEAVE_CHECK(op.tag <= s.tag_ub, "{}: tag {} exceeds MPI_TAG_UB {}", where("batch_p2p"), op.tag, s.tag_ub);
  }
  auto work = MpiWork::take(state_, "batch_p2p");
  work->details("{} ops", ops.size());
  for (const P2POp& op : ops) {
    const bool send = op.kind == P2PKind::kSend;
    work->keep(op.tensor);
    work->post_p2p(send, detail::bytes(op.tensor), op.tensor.numel(), op.tensor.dtype(), op.peer, op.tag, s.comm,
                   detail::peer_label(send, op.peer, op.tag, op.tensor));
  }
  return work;
}

}  // namespace cleave::comm