// The MPI backend's shared pieces (mpi_work.hpp): making a communicator's state, and MpiWork's progress, waits and
// timeout report. Invariant: a Work's wait polls MPI_Test, sleeping only once nothing it waits for has completed
// for a while (PollBackoff), and past train.comm_timeout_s ends the job through the watchdog, naming the op, the
// group and the messages still pending.
#include "engine/comm/mpi/mpi_work.hpp"

#include <algorithm>
#include <cstdlib>

#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/mpi/wait_notice.hpp"
#include "engine/core/log.hpp"

namespace cleave::comm::detail {
namespace {

std::vector<int> translate_ranks(MPI_Comm from, MPI_Comm to) {
  int size = 0;
  CLEAVE_MPI_CHECK(MPI_Comm_size(from, &size));
  std::vector<int> mine(static_cast<std::size_t>(size));
  std::vector<int> theirs(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) mine[static_cast<std::size_t>(i)] = i;
  MPI_Group a = MPI_GROUP_NULL;
  MPI_Group b = MPI_GROUP_NULL;
  CLEAVE_MPI_CHECK(MPI_Comm_group(from, &a));
  CLEAVE_MPI_CHECK(MPI_Comm_group(to, &b));
  CLEAVE_MPI_CHECK(MPI_Group_translate_ranks(a, size, mine.data(), b, theirs.data()));
  MPI_Group_free(&a);
  MPI_Group_free(&b);
  return theirs;
}

// Point-to-point messages are cut into pieces of at most this many bytes, so a wait sees a large transfer
// progress piece by piece (PollBackoff keeps polling while it does).
constexpr std::size_t kProgressPieceBytes = std::size_t{4} << 20;

}  // namespace

std::shared_ptr<MpiCommState> make_state(MPI_Comm owned, const MpiOptions& options, std::string name,
                                         std::shared_ptr<LivenessProbe> probe,
                                         std::shared_ptr<ProgressThread> progress) {
  auto state = std::make_shared<MpiCommState>();
  state->comm = owned;
  CLEAVE_MPI_CHECK(MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN));
  CLEAVE_MPI_CHECK(MPI_Comm_dup(state->comm, &state->internal));
  CLEAVE_MPI_CHECK(MPI_Comm_set_errhandler(state->internal, MPI_ERRORS_RETURN));
  CLEAVE_MPI_CHECK(MPI_Comm_rank(state->comm, &state->rank));
  CLEAVE_MPI_CHECK(MPI_Comm_size(state->comm, &state->size));
  int* tag_ub = nullptr;
  int found = 0;
  CLEAVE_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found));
  if (found && tag_ub != nullptr) state->tag_ub = *tag_ub;
  state->name = std::move(name);
  state->options = options;
  CLEAVE_CHECK(options.timeout_s > 0, "comm '{}': timeout {}s must be positive (train.comm_timeout_s)", state->name,
               options.timeout_s);
  CLEAVE_CHECK(options.max_message_elements >= 1 && options.max_message_elements <= INT_MAX,
               "comm '{}': max_message_elements {} must be in 1..{}", state->name, options.max_message_elements,
               INT_MAX);
  state->world_ranks = translate_ranks(state->comm, MPI_COMM_WORLD);
  state->probe = std::move(probe);
  state->probe_ranks = translate_ranks(state->comm, state->probe->comm());
  state->progress = std::move(progress);
  state->single_copy = single_copy_transport([](const char* variable) { return std::getenv(variable); });
  state->world_ranks_text = format_ranks(state->world_ranks);
  state->reduce_slots.resize(static_cast<std::size_t>(state->size));
  return state;
}

MpiCommState::~MpiCommState() {
  idle_works.clear();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (internal != MPI_COMM_NULL) MPI_Comm_free(&internal);
  if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kBF16: return MPI_UINT16_T;  // moved as raw bits; reduced through f32 staging
    case DType::kF16: return MPI_UINT16_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MpiWork::Ptr MpiWork::take(const std::shared_ptr<MpiCommState>& state, const char* op) {
  std::unique_ptr<MpiWork> work = state->idle_works.take([] { return std::unique_ptr<MpiWork>(new MpiWork()); });
  work->state_ = state;
  work->op_ = op;
  work->done_ = false;
  work->ticket_.start(state->progress.get());
  return Ptr(work.release());
}

MpiWork::~MpiWork() { finish_before_release(); }

void MpiWork::finish_before_release() noexcept {
  if (done_ || failed_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    log::error("{} on comm '{}' failed while its Work was destroyed: {}", op_, state_->name, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void MpiWork::recycle() noexcept {
  finish_before_release();
  ticket_.release();
  details_.clear();
  requests_.clear();
  labels_.clear();
  keep_.clear();
  next_ = nullptr;
  args_ = ContinuationArgs{};
  completed_ = 0;
  done_ = true;
  failed_ = false;
  // The state may go with this last reference, and this Work with its pool: nothing of *this is touched after.
  const std::shared_ptr<MpiCommState> state = std::move(state_);
  state->idle_works.give(std::unique_ptr<MpiWork>(this));
}

void MpiWork::post_p2p(bool send, char* data, std::int64_t count, DType dtype, int peer, int tag, MPI_Comm comm,
                       const RequestLabel& label) {
  const std::size_t elem = dtype_size(dtype);
  const std::int64_t piece =
      std::min(state_->options.max_message_elements, static_cast<std::int64_t>(kProgressPieceBytes / elem));
  for (std::int64_t begin = 0; begin < count; begin += piece) {
    const int n = static_cast<int>(std::min(piece, count - begin));
    MPI_Request request = MPI_REQUEST_NULL;
    char* p = data + static_cast<std::size_t>(begin) * elem;
    if (send) {
      CLEAVE_MPI_CHECK(MPI_Isend(p, n, mpi_type(dtype), peer, tag, comm, &request));
    } else {
      CLEAVE_MPI_CHECK(MPI_Irecv(p, n, mpi_type(dtype), peer, tag, comm, &request));
    }
    add(request, label);
  }
}

bool MpiWork::test() {
  if (done_) return true;
  try {
    for (;;) {
      bool complete = true;
      for (MPI_Request& request : requests_) {
        if (request == MPI_REQUEST_NULL) continue;
        int flag = 0;
        CLEAVE_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
        if (!flag) complete = false;
        if (flag) ++completed_;
      }
      if (!complete) return false;
      requests_.clear();
      labels_.clear();
      if (next_ == nullptr) break;
      const Continuation next = next_;
      next_ = nullptr;
      next(*this, args_);
      ++completed_;
    }
  } catch (...) {
    failed_ = true;
    ticket_.release();
    throw;
  }
  done_ = true;
  ticket_.release();
  keep_.clear();
  args_ = ContinuationArgs{};
  return true;
}

void MpiWork::wait() {
  PollBackoff backoff;
  WaitNotice notice;  // what this rank waits for, printed if the launcher terminates it (wait_notice.hpp)
  std::uint64_t seen = completed_;
  while (!test()) {
    if (completed_ != seen) backoff.progress();  // a piece or phase finished: the transfer is moving
    seen = completed_;
    if (backoff.slow_tick()) {
      state_->probe->serve();
      if (!notice.published() && backoff.elapsed_s() * 1e3 > static_cast<double>(kPublishAfter.count())) {
        FixedText<1024> line;  // the notice's own buffer holds 1 KiB
        int rank = 0;
        int size = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        line.append("[rank {}/{}] terminated by SIGTERM (the launcher is ending the job; another rank failed?) "
                    "while waiting in {} on comm '{}' = world ranks {} (",
                    rank, size, op_, state_->name, state_->world_ranks_text);
        pending_details(line);
        line.append(")");
        notice.publish(line.view());
      }
      if (backoff.elapsed_s() > state_->options.timeout_s) expire(backoff.elapsed_s());
    }
    backoff.pause();
  }
}

namespace {

template <std::size_t N>
void format_label(FixedText<N>& out, const MpiCommState& s, const RequestLabel& label) {
  const char* verb = label.send ? "send to" : "recv from";
  const int world = s.world_ranks[static_cast<std::size_t>(label.peer)];
  if (label.kind == RequestLabel::Kind::kPhase) {
    out.append("{} rank {} (world {}) in phase {} of the rank-ordered reduction", verb, label.peer, world, label.tag);
    return;
  }
  out.append("{} rank {} (world {}) tag {}", verb, label.peer, world, label.tag);
  if (label.numel >= 0) out.append(" ({} {})", label.numel, dtype_name(label.dtype));
}

}  // namespace

template <std::size_t N>
void MpiWork::pending_details(FixedText<N>& out) const {
  out.append("{}", details_.view());
  bool first = true;
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL || labels_[i].kind == RequestLabel::Kind::kNone) continue;
    bool seen = false;  // each label once (a message cut into pieces has one label per piece)
    for (std::size_t j = 0; j < i && !seen; ++j) seen = requests_[j] != MPI_REQUEST_NULL && labels_[j] == labels_[i];
    if (seen) continue;
    out.append("{}", first ? "; pending: " : ", ");
    format_label(out, *state_, labels_[i]);
    first = false;
  }
}

void MpiWork::expire(double elapsed_s) {
  FixedText<4096> details;
  pending_details(details);
  TimeoutContext context{op_, state_->name, state_->world_ranks, state_->probe_ranks, std::string(details.view()),
                         state_->options.timeout_s};
  watchdog_expire(*state_->probe, context, elapsed_s);
}

}  // namespace cleave::comm::detail
