// MPI backend (mpi_communicator.hpp). Each op posts non-blocking MPI calls into an MpiWork; a Work may have
// a continuation that runs when its current requests are complete and may post more (the deterministic
// protocol's second phase, the narrowing of f32 staging buffers).
//
// Why point-to-point for the deterministic protocol: continuations run whenever the caller tests or waits,
// which can differ between ranks. A second-phase *collective* could then be posted in different orders on
// different ranks when several Works are in flight, which MPI forbids; tagged point-to-point messages on a
// private duplicate communicator match regardless of posting order.
#include "engine/comm/mpi/mpi_communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "engine/comm/host_reduce.hpp"
#include "engine/comm/mpi/mpi_check.hpp"
#include "engine/comm/mpi/wait_notice.hpp"
#include "engine/comm/mpi/watchdog.hpp"
#include "engine/core/log.hpp"

namespace cleave::comm {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("unknown MPI error {}", code);
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  return fmt::format("{} (class {})", std::string(text, static_cast<std::size_t>(length)), error_class);
}

namespace detail {

struct MpiCommState {
  MPI_Comm comm = MPI_COMM_NULL;      // user traffic (collectives, batch_p2p)
  MPI_Comm internal = MPI_COMM_NULL;  // deterministic protocol
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;
  std::string name;
  MpiOptions options;
  std::vector<int> world_ranks;
  std::vector<int> probe_ranks;
  std::shared_ptr<LivenessProbe> probe;
  std::shared_ptr<ProgressThread> progress;  // shared with the root and its splits; may be null
  bool single_copy = false;                  // single_copy_transport(), read once when the state is made
  std::uint64_t next_seq = 0;  // advanced by every deterministic op, identically on every member

  ~MpiCommState() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (internal != MPI_COMM_NULL) MPI_Comm_free(&internal);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  // Tag of phase `phase` (0 or 1) of deterministic op `seq`; wraps long before two live ops could collide.
  int tag(std::uint64_t seq, int phase) const {
    const auto window = static_cast<std::uint64_t>(tag_ub / 2);
    return static_cast<int>((seq % window) * 2 + static_cast<std::uint64_t>(phase));
  }
};

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

// Takes ownership of `owned` (already a private handle).
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
  return state;
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

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

// Reductions that take the rank-ordered point-to-point protocol: every floating type, in both modes. 16-bit
// floats need it (MPI has no bf16/f16 arithmetic; the protocol moves 16-bit values and accumulates in f32 with
// one rounding). For f32 it is also the fast path: comm_bench, 2 ranks on this project's 2-core machine
// (Open MPI 4.1, vader, single copy none), median of 20, protocol vs MPI_Iallreduce / MPI_Ireduce_scatter_block
// with the same waits: all_reduce 1 MiB 0.39 vs 0.47 ms, 16 MiB 5.4 vs 10.2 ms, 64 MiB 27 vs 90 ms;
// reduce_scatter 16 MiB 6.7 vs 24 ms, 64 MiB 28 vs 79 ms (Open MPI's blocking MPI_Reduce_scatter_block took
// 18 and 74 ms). Same traffic per rank as a ring; integers keep MPI's native (exact) reductions.
bool rank_ordered(DType dtype) { return is_floating(dtype); }

// Point-to-point messages are cut into pieces of at most this many bytes, so a wait sees a large transfer
// progress piece by piece (PollBackoff keeps polling while it does).
constexpr std::size_t kProgressPieceBytes = std::size_t{4} << 20;

char* bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// One in-flight op: current requests (with a label each for the timeout report), tensors kept alive, and an
// optional continuation run once the current requests are complete.
class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiCommState> state, std::string op, std::string details)
      : state_(std::move(state)), op_(std::move(op)), details_(std::move(details)), ticket_(state_->progress.get()) {}

  ~MpiWork() override {
    if (done_ || failed_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log::error("{} on comm '{}' failed while its Work was destroyed: {}", op_, state_->name, e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  void add(MPI_Request request, std::string label = {}) {
    requests_.push_back(request);
    labels_.push_back(std::move(label));
  }
  void keep(const Tensor& t) { keep_.push_back(t); }
  void then(std::function<void(MpiWork&)> next) { next_ = std::move(next); }

  // Posts `count` elements starting at `data` as pieces of at most kProgressPieceBytes (and max_message_elements),
  // all with one tag (MPI keeps messages of one (source, tag, comm) in order, so the pieces match up: both
  // sides cut the same count of the same dtype the same way). Each completed piece tells wait() that the
  // transfer is moving, so it keeps polling instead of sleeping (watchdog.hpp, PollBackoff).
  void post_p2p(bool send, char* data, std::int64_t count, DType dtype, int peer, int tag, MPI_Comm comm,
                const std::string& label) {
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

  bool test() override {
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
        if (!next_) break;
        auto next = std::move(next_);
        next_ = nullptr;
        next(*this);
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
    return true;
  }

  void wait() override {
    PollBackoff backoff;
    WaitNotice notice;  // what this rank waits for, printed if the launcher terminates it (wait_notice.hpp)
    std::uint64_t seen = completed_;
    while (!test()) {
      if (completed_ != seen) backoff.progress();  // a piece or phase finished: the transfer is moving
      seen = completed_;
      if (backoff.slow_tick()) {
        state_->probe->serve();
        if (!notice.published() && backoff.elapsed_s() * 1e3 > static_cast<double>(kPublishAfter.count())) {
          notice.publish(describe_wait());
        }
        if (backoff.elapsed_s() > state_->options.timeout_s) expire(backoff.elapsed_s());
      }
      backoff.pause();
    }
  }

 private:
  std::string describe_wait() const {
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return fmt::format("[rank {}/{}] terminated by SIGTERM (the launcher is ending the job; another rank failed?) "
                       "while waiting in {} on comm '{}' = world ranks {} ({})",
                       rank, size, op_, state_->name, format_ranks(state_->world_ranks), pending_details());
  }

  // The op's details plus the labels of its incomplete requests ("...; pending: recv from rank 3 tag 0").
  std::string pending_details() const {
    std::vector<std::string> pending;
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] != MPI_REQUEST_NULL && !labels_[i].empty() &&
          std::find(pending.begin(), pending.end(), labels_[i]) == pending.end()) {
        pending.push_back(labels_[i]);
      }
    }
    std::string details = details_;
    if (!pending.empty()) {
      details += "; pending:";
      for (const auto& p : pending) details += " " + p + ",";
      details.pop_back();
    }
    return details;
  }

  [[noreturn]] void expire(double elapsed_s) {
    TimeoutContext context{op_, state_->name, state_->world_ranks, state_->probe_ranks, pending_details(),
                           state_->options.timeout_s};
    watchdog_expire(*state_->probe, context, elapsed_s);
  }

  std::shared_ptr<MpiCommState> state_;
  std::string op_;
  std::string details_;
  std::vector<MPI_Request> requests_;
  std::vector<std::string> labels_;
  std::vector<Tensor> keep_;
  std::function<void(MpiWork&)> next_;
  ProgressTicket ticket_;  // outstanding for the progress thread until done or failed
  std::uint64_t completed_ = 0;  // requests and continuations completed so far (progress, for wait's backoff)
  bool done_ = false;
  bool failed_ = false;
};

std::string describe(const Tensor& t) { return fmt::format("{} {}", t.numel(), dtype_name(t.dtype())); }

std::string peer_label(const MpiCommState& s, bool send, int peer, int tag) {
  return fmt::format("{} {} rank {} (world {}) tag {}", send ? "send" : "recv", send ? "to" : "from", peer,
                     s.world_ranks[static_cast<std::size_t>(peer)], tag);
}

// Label of a message of the deterministic protocol (phase 0: contributions in, phase 1: results out).
std::string phase_label(const MpiCommState& s, bool send, int peer, int phase) {
  return fmt::format("{} {} rank {} (world {}) in phase {} of the rank-ordered reduction", send ? "send" : "recv",
                     send ? "to" : "from", peer, s.world_ranks[static_cast<std::size_t>(peer)], phase);
}

// Block b of `count` elements cut into `n` near-equal blocks: [begin, end).
std::int64_t block_begin(std::int64_t count, int n, int b) { return count * b / n; }

}  // namespace
}  // namespace detail

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

void MpiCommunicator::guarded_barrier(std::string_view op) const {
  auto work = std::make_unique<MpiWork>(state_, std::string(op), "barrier before a blocking MPI call");
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

WorkPtr MpiCommunicator::all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  (void)stream;
  check_cpu(tensor, "all_reduce");
  MpiCommState& s = *state_;
  const DType dtype = tensor.dtype();
  const std::int64_t count = tensor.numel();
  auto work = std::make_unique<MpiWork>(state_, "all_reduce",
                                        fmt::format("{}, {}", detail::describe(tensor), reduce_op_name(op)));
  work->keep(tensor);

  if (detail::rank_ordered(dtype)) {
    // Phase 0: block q of every rank goes to rank q. Phase 1: rank q's ordered result goes to everyone.
    const int n = s.size;
    const int r = s.rank;
    const std::int64_t mine_begin = detail::block_begin(count, n, r);
    const std::int64_t mine = detail::block_begin(count, n, r + 1) - mine_begin;
    const std::size_t elem = dtype_size(dtype);
    Tensor staging =
        Tensor::empty({static_cast<std::int64_t>(n) * mine}, dtype, MemoryCategory::kCommunication, cpu_allocator());
    work->keep(staging);
    const std::uint64_t seq = s.next_seq++;
    char* data = detail::bytes(tensor);
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      work->post_p2p(false, detail::bytes(staging) + static_cast<std::size_t>(q * mine) * elem, mine, dtype, q,
                     s.tag(seq, 0), s.internal, detail::phase_label(s, false, q, 0));
    }
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const std::int64_t b = detail::block_begin(count, n, q);
      work->post_p2p(true, data + static_cast<std::size_t>(b) * elem, detail::block_begin(count, n, q + 1) - b, dtype,
                     q, s.tag(seq, 0), s.internal, detail::phase_label(s, true, q, 0));
    }
    work->then([state = state_, staging, data, dtype, op, count, mine, mine_begin, seq, elem](MpiWork& w) {
      const MpiCommState& st = *state;
      std::vector<const void*> slots(static_cast<std::size_t>(st.size));
      char* own = data + static_cast<std::size_t>(mine_begin) * elem;
      for (int q = 0; q < st.size; ++q) {
        slots[static_cast<std::size_t>(q)] =
            q == st.rank ? own : detail::bytes(staging) + static_cast<std::size_t>(q * mine) * elem;
      }
      ordered_reduce(dtype, op, slots, own, mine);
      for (int q = 0; q < st.size; ++q) {
        if (q == st.rank) continue;
        const std::int64_t b = detail::block_begin(count, st.size, q);
        w.post_p2p(false, data + static_cast<std::size_t>(b) * elem, detail::block_begin(count, st.size, q + 1) - b,
                   dtype, q, st.tag(seq, 1), st.internal, detail::phase_label(st, false, q, 1));
      }
      for (int q = 0; q < st.size; ++q) {
        if (q == st.rank) continue;
        w.post_p2p(true, own, mine, dtype, q, st.tag(seq, 1), st.internal, detail::phase_label(st, true, q, 1));
      }
    });
    return work;
  }

  const std::int64_t piece = s.options.max_message_elements;
  const std::size_t elem = dtype_size(dtype);
  for (std::int64_t begin = 0; begin < count; begin += piece) {
    MPI_Request request = MPI_REQUEST_NULL;
    CLEAVE_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, detail::bytes(tensor) + static_cast<std::size_t>(begin) * elem,
                                    static_cast<int>(std::min(piece, count - begin)), detail::mpi_type(dtype),
                                    detail::mpi_op(op), s.comm, &request));
    work->add(request);
  }
  return work;
}

WorkPtr MpiCommunicator::reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                                             const Stream& stream) {
  (void)stream;
  check_cpu(input, "reduce_scatter");
  check_cpu(output, "reduce_scatter");
  MpiCommState& s = *state_;
  const DType dtype = input.dtype();
  const std::int64_t count = output.numel();  // per rank
  const std::size_t elem = dtype_size(dtype);
  auto work = std::make_unique<MpiWork>(
      state_, "reduce_scatter", fmt::format("{} per rank, {}", detail::describe(output), reduce_op_name(op)));
  work->keep(input);
  work->keep(output);

  if (detail::rank_ordered(dtype)) {
    const int n = s.size;
    const int r = s.rank;
    Tensor staging =
        Tensor::empty({static_cast<std::int64_t>(n) * count}, dtype, MemoryCategory::kCommunication, cpu_allocator());
    work->keep(staging);
    const std::uint64_t seq = s.next_seq++;
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      work->post_p2p(false, detail::bytes(staging) + static_cast<std::size_t>(q * count) * elem, count, dtype, q,
                     s.tag(seq, 0), s.internal, detail::phase_label(s, false, q, 0));
    }
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      work->post_p2p(true, detail::bytes(input) + static_cast<std::size_t>(q * count) * elem, count, dtype, q,
                     s.tag(seq, 0), s.internal, detail::phase_label(s, true, q, 0));
    }
    work->then([state = state_, input, output, staging, dtype, op, count, elem](MpiWork&) {
      std::vector<const void*> slots(static_cast<std::size_t>(state->size));
      for (int q = 0; q < state->size; ++q) {
        const Tensor& from = q == state->rank ? input : staging;
        slots[static_cast<std::size_t>(q)] = detail::bytes(from) + static_cast<std::size_t>(q * count) * elem;
      }
      ordered_reduce(dtype, op, slots, output.raw_data(), count);
    });
    return work;
  }

  CLEAVE_CHECK(count <= s.options.max_message_elements,
               "{}: {} elements per rank exceed the {} an MPI call can carry; split the tensor into smaller "
               "reduce_scatter calls",
               where("reduce_scatter"), count, s.options.max_message_elements);
  // In place (output is the input's own block): MPI's MPI_IN_PLACE puts the result at the buffer's start,
  // not at block r, so receive into a temporary and copy.
  const bool in_place = tensors_overlap(input, output);
  Tensor target = in_place ? Tensor::empty({count}, dtype, MemoryCategory::kCommunication, cpu_allocator()) : output;
  work->keep(target);
  MPI_Request request = MPI_REQUEST_NULL;
  CLEAVE_MPI_CHECK(MPI_Ireduce_scatter_block(input.raw_data(), target.raw_data(), static_cast<int>(count),
                                             detail::mpi_type(dtype), detail::mpi_op(op), s.comm, &request));
  work->add(request);
  if (in_place) {
    work->then([target, output](MpiWork&) { std::memcpy(output.raw_data(), target.raw_data(), output.nbytes()); });
  }
  return work;
}

WorkPtr MpiCommunicator::all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) {
  (void)stream;
  check_cpu(input, "all_gather");
  check_cpu(output, "all_gather");
  MpiCommState& s = *state_;
  const std::int64_t count = input.numel();
  const std::size_t elem = dtype_size(input.dtype());
  auto work = std::make_unique<MpiWork>(state_, "all_gather", fmt::format("{} per rank", detail::describe(input)));
  work->keep(input);
  work->keep(output);
  // Point-to-point, every rank's block straight to every other rank (the same bytes per rank as a ring, cut into
  // progress pieces): MPI_Iallgather took 84 ms for 64 MiB on 2 ranks where this takes 25 (comm_bench).
  char* own = detail::bytes(output) + static_cast<std::size_t>(s.rank * count) * elem;
  if (tensors_overlap(input, output)) {
    CLEAVE_CHECK(input.raw_data() == own, "{}: an in-place input must be this rank's block {} of the output",
                 where("all_gather"), s.rank);
  } else if (count > 0) {
    std::memcpy(own, input.raw_data(), input.nbytes());
  }
  const std::uint64_t seq = s.next_seq++;
  for (int q = 0; q < s.size; ++q) {
    if (q == s.rank) continue;
    work->post_p2p(false, detail::bytes(output) + static_cast<std::size_t>(q * count) * elem, count, input.dtype(), q,
                   s.tag(seq, 0), s.internal, detail::peer_label(s, false, q, s.tag(seq, 0)));
  }
  for (int q = 0; q < s.size; ++q) {
    if (q == s.rank) continue;
    work->post_p2p(true, own, count, input.dtype(), q, s.tag(seq, 0), s.internal,
                   detail::peer_label(s, true, q, s.tag(seq, 0)));
  }
  return work;
}

WorkPtr MpiCommunicator::broadcast_impl(const Tensor& tensor, int root, const Stream& stream) {
  (void)stream;
  check_cpu(tensor, "broadcast");
  MpiCommState& s = *state_;
  auto work = std::make_unique<MpiWork>(state_, "broadcast",
                                        fmt::format("{}, root rank {}", detail::describe(tensor), root));
  work->keep(tensor);
  const std::int64_t count = tensor.numel();
  const std::int64_t piece = s.options.max_message_elements;
  const std::size_t elem = dtype_size(tensor.dtype());
  for (std::int64_t begin = 0; begin < count; begin += piece) {
    MPI_Request request = MPI_REQUEST_NULL;
    CLEAVE_MPI_CHECK(MPI_Ibcast(detail::bytes(tensor) + static_cast<std::size_t>(begin) * elem,
                                static_cast<int>(std::min(piece, count - begin)), detail::mpi_type(tensor.dtype()),
                                root, s.comm, &request));
    work->add(request);
  }
  return work;
}

WorkPtr MpiCommunicator::barrier_impl(const Stream& stream) {
  (void)stream;
  auto work = std::make_unique<MpiWork>(state_, "barrier", "");
  MPI_Request request = MPI_REQUEST_NULL;
  CLEAVE_MPI_CHECK(MPI_Ibarrier(state_->comm, &request));
  work->add(request);
  return work;
}

WorkPtr MpiCommunicator::batch_p2p_impl(std::vector<P2POp> ops, const Stream& stream) {
  (void)stream;
  MpiCommState& s = *state_;
  std::string details;
  for (const P2POp& op : ops) {
    check_cpu(op.tensor, "batch_p2p");
    CLEAVE_CHECK(op.tag <= s.tag_ub, "{}: tag {} exceeds MPI_TAG_UB {}", where("batch_p2p"), op.tag, s.tag_ub);
  }
  auto work = std::make_unique<MpiWork>(state_, "batch_p2p", fmt::format("{} ops", ops.size()));
  for (const P2POp& op : ops) {
    const bool send = op.kind == P2PKind::kSend;
    work->keep(op.tensor);
    work->post_p2p(send, detail::bytes(op.tensor), op.tensor.numel(), op.tensor.dtype(), op.peer, op.tag, s.comm,
                   detail::peer_label(s, send, op.peer, op.tag) + " (" + detail::describe(op.tensor) + ")");
  }
  return work;
}

}  // namespace cleave::comm
