// Internal to the MPI backend (engine/comm/mpi): what its files share. MpiCommState is a communicator's MPI
// handles and options, shared with its Works (a Work may outlive the communicator that posted it); MpiWork is one
// in-flight op: non-blocking MPI requests, the tensors they use, and an optional continuation run when the current
// requests are complete, which may post more (the rank-ordered protocol's second phase, the narrowing of f32
// staging buffers). mpi_communicator.cpp holds the communicator's own calls, mpi_collectives.cpp the collectives.
//
// Invariants: a Work keeps every tensor its requests read or write alive until it is done; a Work destroyed
// before completion waits for it (and aborts the job if that fails), so no request outlives its buffers; every
// deterministic op advances MpiCommState::next_seq identically on every member, so its tags match on every rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/host_reduce.hpp"
#include "engine/comm/mpi/mpi_communicator.hpp"
#include "engine/comm/mpi/progress_thread.hpp"
#include "engine/comm/mpi/watchdog.hpp"
#include "engine/comm/op_parts.hpp"

namespace cleave::comm::detail {

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

// One in-flight op: current requests (with a label each for the timeout report), tensors kept alive, and an
// optional continuation run once the current requests are complete.
class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiCommState> state, std::string op, std::string details)
      : state_(std::move(state)), op_(std::move(op)), details_(std::move(details)), ticket_(state_->progress.get()) {}

  ~MpiWork() override;

  void add(MPI_Request request, std::string label = {}) {
    requests_.push_back(request);
    labels_.push_back(std::move(label));
  }
  void keep(const Tensor& t) { keep_.push_back(t); }
  void then(std::function<void(MpiWork&)> next) { next_ = std::move(next); }

  // Posts `count` elements starting at `data` as pieces of at most 4 MiB (and max_message_elements),
  // all with one tag (MPI keeps messages of one (source, tag, comm) in order, so the pieces match up: both
  // sides cut the same count of the same dtype the same way). Each completed piece tells wait() that the
  // transfer is moving, so it keeps polling instead of sleeping (watchdog.hpp, PollBackoff).
  void post_p2p(bool send, char* data, std::int64_t count, DType dtype, int peer, int tag, MPI_Comm comm,
                const std::string& label);

  bool test() override;
  void wait() override;

 private:
  std::string describe_wait() const;
  // The op's details plus the labels of its incomplete requests ("...; pending: recv from rank 3 tag 0").
  std::string pending_details() const;
  [[noreturn]] void expire(double elapsed_s);

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

// Label of one point-to-point message, for the timeout report ("send to rank 1 (world 3) tag 7").
std::string peer_label(const MpiCommState& s, bool send, int peer, int tag);
// Label of a message of the deterministic protocol (phase 0: contributions in, phase 1: results out).
std::string phase_label(const MpiCommState& s, bool send, int peer, int phase);

}  // namespace cleave::comm::detail
