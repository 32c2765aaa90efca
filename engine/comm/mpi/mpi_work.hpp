// Internal to the MPI backend (engine/comm/mpi): what its files share. MpiCommState is a communicator's MPI
// handles and options, shared with its Works (a Work may outlive the communicator that posted it); MpiWork is one
// in-flight op: non-blocking MPI requests, the tensors they use, and an optional continuation run when the current
// requests are complete, which may post more (the rank-ordered protocol's second phase, the narrowing of f32
// staging buffers). mpi_communicator.cpp holds the communicator's own calls, mpi_collectives.cpp the collectives.
//
// Invariants: a Work keeps every tensor its requests read or write alive until it is done; a Work dropped before
// completion waits for it (and aborts the job if that fails), so no request outlives its buffers; every
// deterministic op advances MpiCommState::next_seq identically on every member, so its tags match on every rank.
// No heap allocation per op once a run is warm: a dropped Work goes back to its state's pool (MpiWork::take) with its
// vectors' capacity; its details, request labels and continuation are plain values, formatted into text only for a
// wait notice or a timeout report.
#pragma once

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/comm/host_reduce.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/comm/mpi/progress_thread.hpp"
#include "engine/comm/mpi/watchdog.hpp"
#include "engine/comm/op_parts.hpp"
#include "engine/comm/work_pool.hpp"

namespace cleave::comm::detail {

class MpiWork;

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
  std::string world_ranks_text;  // format_ranks(world_ranks), for wait notices
  std::vector<const void*> reduce_slots;  // size entries: the rank-ordered reductions' inputs (one thread drives ops)
  WorkPool<MpiWork> idle_works;  // finished Works kept for the next ops (MpiWork::take, engine/comm/work_pool.hpp)

  MpiCommState() = default;
  MpiCommState(const MpiCommState&) = delete;
  MpiCommState& operator=(const MpiCommState&) = delete;
  ~MpiCommState();

  // Tag of phase `phase` (0 or 1) of deterministic op `seq`; wraps long before two live ops could collide.
  int tag(std::uint64_t seq, int phase) const {
    const auto window = static_cast<std::uint64_t>(tag_ub / 2);
    return static_cast<int>((seq % window) * 2 + static_cast<std::uint64_t>(phase));
  }
};

// A state for `owned` (already a private handle, which the state now owns): its duplicate for the protocol, its
// rank, size and tag bound, its ranks in the world and in the probe's communicator; the options are checked here.
std::shared_ptr<MpiCommState> make_state(MPI_Comm owned, const MpiOptions& options, std::string name,
                                         std::shared_ptr<LivenessProbe> probe,
                                         std::shared_ptr<ProgressThread> progress);

MPI_Datatype mpi_type(DType dtype);

inline MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

// Reductions that take the rank-ordered point-to-point protocol: every floating type, in both modes. 16-bit
// floats need it (MPI has no bf16/f16 arithmetic; the protocol moves 16-bit values and accumulates in f32 with
// one rounding). For f32 it is also the fast path: comm_bench, 2 ranks on this project's 2-core machine
// (Open MPI 4.1, vader, single copy none), median of 20, protocol vs MPI_Iallreduce / MPI_Ireduce_scatter_block
// with the same waits: all_reduce 1 MiB 0.39 vs 0.47 ms, 16 MiB 5.4 vs 10.2 ms, 64 MiB 27 vs 90 ms;
// reduce_scatter 16 MiB 6.7 vs 24 ms, 64 MiB 28 vs 79 ms (Open MPI's blocking MPI_Reduce_scatter_block took
// 18 and 74 ms). Same traffic per rank as a ring; integers keep MPI's native (exact) reductions.
inline bool rank_ordered(DType dtype) { return is_floating(dtype); }

// What one request is, for the wait notice and the timeout report; formatted only then (format_label).
struct RequestLabel {
  enum class Kind : std::uint8_t { kNone, kPeer, kPhase };
  Kind kind = Kind::kNone;
  bool send = false;
  int peer = 0;
  int tag = 0;             // kPeer: the message's tag; kPhase: the protocol's phase (0 or 1)
  std::int64_t numel = -1;  // kPeer: the tensor's elements (-1: none named)
  DType dtype = DType::kF32;
  friend bool operator==(const RequestLabel&, const RequestLabel&) = default;
};

// A point-to-point message: "send to rank 1 (world 3) tag 7", with " (4096 f32)" when a tensor is named.
inline RequestLabel peer_label(bool send, int peer, int tag) { return {RequestLabel::Kind::kPeer, send, peer, tag}; }
inline RequestLabel peer_label(bool send, int peer, int tag, const Tensor& t) {
  return {RequestLabel::Kind::kPeer, send, peer, tag, t.numel(), t.dtype()};
}
// A message of the deterministic protocol (phase 0: contributions in, phase 1: results out).
inline RequestLabel phase_label(bool send, int peer, int phase) {
  return {RequestLabel::Kind::kPhase, send, peer, phase};
}

// Text into a fixed buffer, cut at its end: a Work's details and a wait notice, written with no allocation.
template <std::size_t N>
class FixedText {
 public:
  template <class... Args>
  void append(fmt::format_string<Args...> format, Args&&... args) {
    const auto r = fmt::format_to_n(chars_.data() + size_, N - size_, format, std::forward<Args>(args)...);
    size_ = std::min(N, size_ + static_cast<std::size_t>(r.size));
  }
  void clear() { size_ = 0; }
  std::string_view view() const { return {chars_.data(), size_}; }

 private:
  std::array<char, N> chars_{};
  std::size_t size_ = 0;
};

// What a continuation works on: the op's tensors and numbers, held by value in the Work (no closure on the heap).
struct ContinuationArgs {
  Tensor input{};
  Tensor output{};
  Tensor staging{};
  char* data = nullptr;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  std::int64_t count = 0;
  std::int64_t mine = 0;
  std::int64_t mine_begin = 0;
  std::uint64_t seq = 0;
  std::size_t elem = 0;
};

// One in-flight op: current requests (with a label each for the timeout report), tensors kept alive, and an
// optional continuation run once the current requests are complete.
class MpiWork final : public Work {
 public:
  using Continuation = void (*)(MpiWork& work, const ContinuationArgs& args);
  using Ptr = std::unique_ptr<MpiWork, WorkRelease>;

  // A Work for op `op` (a string literal: kept by pointer) from `state`'s pool, or a new one when it is empty.
  static Ptr take(const std::shared_ptr<MpiCommState>& state, const char* op);

  ~MpiWork() override;

  // The op's details for the reports ("4096 f32, sum"), cut at 160 characters.
  template <class... Args>
  void details(fmt::format_string<Args...> format, Args&&... args) {
    details_.append(format, std::forward<Args>(args)...);
  }
  void add(MPI_Request request, RequestLabel label = {}) {
    requests_.push_back(request);
    labels_.push_back(label);
  }
  void keep(const Tensor& t) { keep_.push_back(t); }
  void then(Continuation next, ContinuationArgs args) {
    next_ = next;
    args_ = std::move(args);
  }
  const MpiCommState& state() const { return *state_; }
  MpiCommState& state() { return *state_; }

  // Posts `count` elements starting at `data` as pieces of at most 4 MiB (and max_message_elements),
  // all with one tag (MPI keeps messages of one (source, tag, comm) in order, so the pieces match up: both
  // sides cut the same count of the same dtype the same way). Each completed piece tells wait() that the
  // transfer is moving, so it keeps polling instead of sleeping (watchdog.hpp, PollBackoff).
  void post_p2p(bool send, char* data, std::int64_t count, DType dtype, int peer, int tag, MPI_Comm comm,
                const RequestLabel& label);

  bool test() override;
  void wait() override;

 protected:
  void recycle() noexcept override;

 private:
  MpiWork() = default;
  void finish_before_release() noexcept;
  // The op's details plus the labels of its incomplete requests ("...; pending: recv from rank 3 tag 0").
  template <std::size_t N>
  void pending_details(FixedText<N>& out) const;
  [[noreturn]] void expire(double elapsed_s);

  std::shared_ptr<MpiCommState> state_;  // null while idle in the pool
  const char* op_ = "";
  FixedText<160> details_;
  std::vector<MPI_Request> requests_;
  std::vector<RequestLabel> labels_;
  std::vector<Tensor> keep_;
  Continuation next_ = nullptr;
  ContinuationArgs args_;
  ProgressTicket ticket_;  // outstanding for the progress thread until done or failed
  std::uint64_t completed_ = 0;  // requests and continuations completed so far (progress, for wait's backoff)
  bool done_ = true;  // an idle Work counts as done
  bool failed_ = false;
};

}  // namespace cleave::comm::detail
