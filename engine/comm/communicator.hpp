// Communicator: the small asynchronous interface every backend implements (docs/architecture.md).
//
//   rank size split | all_reduce reduce_scatter all_gather broadcast barrier | batch_p2p all_to_all_v | abort
//
// Invariants every backend keeps:
//  - Ops return at once with a Work handle; the tensors must not be read or written by the caller until
//    Work::wait() returned or Work::test() returned true. The Work holds a reference to every tensor's
//    storage until then, so the memory itself stays valid even if the caller drops its Tensor objects (an op
//    completed on the device releases them at wait(): see Streams below).
//  - Collectives are matched by call order: every member of a communicator issues the same collectives in
//    the same order with the same element counts and dtype (as in MPI and NCCL). Several Works may be in
//    flight at once and may be completed in any order.
//  - Work::wait() never blocks forever: after CommOptions::timeout_s it logs
//    `[rank r/N] comm timeout after Xs in <op> (...)` naming the group, the pending peers and the ranks that
//    do not answer, and aborts the whole job (MPI_Abort) so no peer hangs. It does not return then.
//  - Deterministic mode: floating-point reductions combine the ranks' contributions in the canonical order
//    of engine/core/sum_tree.hpp over ranks 0..n-1 (left to right for n <= 3; ((r0+r1)+(r2+r3)) for 4;
//    bf16/f16 accumulate in f32 and round once), so results are bit-identical whatever
//    algorithm or topology the library would pick. Integer reductions are exact in both modes. (The MPI
//    backend keeps the canonical order in plain mode too: its floating-point protocol is also its fastest.)
//  - Not thread-safe: one thread at a time drives all communicators of a process (MPI_THREAD_SERIALIZED).
//    A backend may run a helper thread of its own that never touches a Work (the MPI backend's progress
//    thread, engine/comm/mpi/progress_thread.hpp).
//
// Streams: every op takes the stream whose earlier work produced the inputs. The MPI backend carries CPU
// tensors; its stream is the (synchronous) CPU stream and ops start on the host at once. The NCCL backend
// enqueues the op on the communicator's own CUDA stream after all work already queued on `stream`; a CPU
// stream (or a null native handle) means the device's legacy default stream. wait() makes anything issued
// after it see the result: the MPI and staged backends (and NCCL on a CPU stream, or in its host-wait debug
// mode) block the host until the op has completed; NCCL on a CUDA stream completes on the device instead:
// wait() makes `stream` wait for the op (an event) and returns at once, its watchdog thread keeps the timeout
// (engine/comm/nccl/device_completions.hpp). So after wait(), work on `stream` (and memory released to an
// allocator ordered on `stream`) is ordered after the op; other streams and the host must sync with `stream`.
//
// Adding a backend: derive from Communicator, implement the *_impl hooks (argument checks common to all
// backends are done here before they are called) and construct it explicitly; there is no registry.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/stream.hpp"
#include "engine/core/tensor.hpp"

namespace cleave::ops {
class HostWaits;
}

namespace cleave::comm {

enum class ReduceOp { kSum, kMax };
std::string_view reduce_op_name(ReduceOp op);  // "sum", "max"

enum class P2PKind { kSend, kRecv };

// One send or receive of a batch_p2p call. `peer` is a rank of the communicator the batch is posted on.
// A receive's tensor must have exactly the size of the matching send (same dtype, same element count).
struct P2POp {
  P2PKind kind = P2PKind::kSend;
  Tensor tensor;
  int peer = 0;
  int tag = 0;

  static P2POp send(Tensor tensor, int peer, int tag = 0) { return {P2PKind::kSend, std::move(tensor), peer, tag}; }
  static P2POp recv(Tensor tensor, int peer, int tag = 0) { return {P2PKind::kRecv, std::move(tensor), peer, tag}; }
};

// Options shared by all backends. Both come from the config: train.comm_timeout_s, train.deterministic.
struct CommOptions {
  double timeout_s = 300.0;    // watchdog: a Work not complete after this long aborts the job
  bool deterministic = false;  // reductions in fixed rank order (see the file comment)
  // This process's index on its node, resolved once when the world is made (make_world_communicator, by
  // resolve_local_rank in launch_env.hpp) and read by everything that places the rank on a GPU (the NCCL probe,
  // the NCCL world, the trainer); -1 in a communicator made outside the factory (tests).
  int local_rank = -1;
};

// Handle to one in-flight operation. Destroying an incomplete Work waits for it (an in-flight transfer's
// buffers cannot be released safely), with the same watchdog as wait().
class Work {
 public:
  virtual ~Work() = default;
  Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Non-blocking: drives progress and returns true once the op is complete (then the outputs are valid).
  // Throws BackendError if the backend reports a failure.
  virtual bool test() = 0;
  // Blocks until the op is complete, or aborts the job after the communicator's timeout.
  virtual void wait() = 0;

 protected:
  friend struct WorkRelease;
  // Where a handle goes when its owner drops it: deleted, unless the backend keeps finished Works for its next ops
  // (the MPI backend's pool, so a steady-state step allocates no Work). Waits first, as the destructor does.
  virtual void recycle() noexcept { delete this; }
};

// WorkPtr's deleter: hands the Work to its backend (Work::recycle). Made from std::default_delete, so a
// std::make_unique<SomeWork>() converts to a WorkPtr.
struct WorkRelease {
  WorkRelease() = default;
  template <class W>
  WorkRelease(std::default_delete<W>) {}  // NOLINT(google-explicit-constructor): the conversion is the point
  void operator()(Work* work) const noexcept { work->recycle(); }
};
using WorkPtr = std::unique_ptr<Work, WorkRelease>;

// A Work that is complete from the start (empty tensors, single-rank no-ops).
class CompletedWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;  // "mpi", "nccl"
  // Label used in messages: "world", "world/tp", ...
  virtual const std::string& name() const = 0;
  // Global (MPI_COMM_WORLD) rank of every member, indexed by rank in this communicator.
  virtual const std::vector<int>& world_ranks() const = 0;
  virtual const CommOptions& options() const = 0;
  // Whether a posted send moves to its peer without this rank sitting in a wait (a background progress thread,
  // or a transport the receiver pulls from alone). False: a rank must wait on its sends for them to move, so
  // the pipeline executor waits for them beside the receive that answers them.
  virtual bool sends_progress_on_their_own() const { return false; }

  // Collective and blocking over all members (bounded by the watchdog). Members passing the same color form
  // one new communicator, ranked by (key, rank here). color < 0: this rank joins none and gets nullptr.
  // `name` is appended to this communicator's name in messages (default "split(color=c)").
  std::unique_ptr<Communicator> split(int color, int key, std::string_view name = {});

  // In place: every rank ends with op over all ranks' tensors. Same shape and dtype on every rank.
  WorkPtr all_reduce(const Tensor& tensor, ReduceOp op, const Stream& stream = cpu_stream());
  // input holds size() equal blocks; rank r's output = op over all ranks of block r.
  // output.numel() * size() == input.numel(). output may be input's own block r (in place), nothing else
  // may overlap.
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::kSum,
                         const Stream& stream = cpu_stream());
  // output = concatenation of every rank's input in rank order. output.numel() == input.numel() * size().
  // input may be output's own block r (in place), nothing else may overlap.
  WorkPtr all_gather(const Tensor& input, const Tensor& output, const Stream& stream = cpu_stream());
  // Every rank's tensor becomes root's tensor.
  WorkPtr broadcast(const Tensor& tensor, int root, const Stream& stream = cpu_stream());
  // Completes once every member has entered the barrier.
  WorkPtr barrier(const Stream& stream = cpu_stream());
  // All sends and receives are posted together (one ncclGroupStart/End on NCCL), so a ring or any
  // exchange pattern cannot deadlock on ordering. Messages between one pair with one tag match in order.
  // The ops are copied (into this communicator's reused list: a steady-state batch allocates nothing); a caller
  // may pass a fixed array. The vector form is the same call, for braced lists.
  WorkPtr batch_p2p(std::span<const P2POp> ops, const Stream& stream = cpu_stream());
  WorkPtr batch_p2p(const std::vector<P2POp>& ops, const Stream& stream = cpu_stream()) {
    return batch_p2p(std::span<const P2POp>(ops), stream);
  }
  // All-to-all with variable counts (expert parallelism's token dispatch, layers/moe/expert_dispatch.hpp).
  // `send` holds size() consecutive blocks of rows (a row: the elements of one index of dim 0), block q of
  // send_rows[q] rows going to rank q; `recv` receives, in rank order, block p of recv_rows[p] rows from rank p.
  // Every rank's recv_rows[p] must equal rank p's send_rows[rank()] (exchange them first: exchange_counts); row
  // width, dtype and device are the same on every rank. send and recv must not overlap. Blocks of 0 rows move
  // nothing (a rank may send or receive no rows at all). The data is copied exactly (no arithmetic), so the
  // result does not depend on the backend's algorithm. Matched by call order like a collective.
  WorkPtr all_to_all_v(const Tensor& send, std::span<const std::int64_t> send_rows, const Tensor& recv,
                       std::span<const std::int64_t> recv_rows, const Stream& stream = cpu_stream());

  // Tears the job down: logs `[rank r/N] reason`, aborts the backend's in-flight operations
  // (ncclCommAbort on NCCL) and calls MPI_Abort so every rank ends. For fatal errors only.
  [[noreturn]] virtual void abort(const std::string& reason) = 0;

  // Notes every host wait on device work of this communicator's later ops as ops::HostWait::kCommunication in
  // `waits` (the run's counter, kernels/ops/host_waits.hpp); null stops counting. Not owned: the owner clears it
  // (or destroys this communicator) before `waits` goes. Not inherited by splits. Backends that carry only host
  // tensors (MPI) never wait on a device and ignore it.
  virtual void count_host_waits(ops::HostWaits* waits) { (void)waits; }

 protected:
  // Hooks called after the common argument checks. Zero-element collectives never reach them.
  virtual std::unique_ptr<Communicator> split_impl(int color, int key, std::string name) = 0;
  virtual WorkPtr all_reduce_impl(const Tensor& tensor, ReduceOp op, const Stream& stream) = 0;
  virtual WorkPtr reduce_scatter_impl(const Tensor& input, const Tensor& output, ReduceOp op,
                                      const Stream& stream) = 0;
  virtual WorkPtr all_gather_impl(const Tensor& input, const Tensor& output, const Stream& stream) = 0;
  virtual WorkPtr broadcast_impl(const Tensor& tensor, int root, const Stream& stream) = 0;
  virtual WorkPtr barrier_impl(const Stream& stream) = 0;
  // Receives all precede sends in `ops` (sorted by the caller, stable otherwise), none empty; valid for the call.
  virtual WorkPtr batch_p2p_impl(std::span<const P2POp> ops, const Stream& stream) = 0;
  // Optional: the default posts one batch of point-to-point messages, each non-empty block a send or a receive
  // (on MPI a batch of Isend/Irecv, on NCCL one ncclGroupStart/End of ncclSend/ncclRecv: the grouped
  // send/receive all-to-all). `send_blocks[q]` / `recv_blocks[p]` are the row blocks cut by the caller.
  virtual WorkPtr all_to_all_v_impl(std::span<const Tensor> send_blocks, std::span<const Tensor> recv_blocks,
                                    const Stream& stream);

  // "all_reduce on comm 'world/dp' (rank 1 of 4)": prefix for argument errors.
  std::string where(std::string_view op) const;

 private:
  friend WorkPtr exchange_counts(Communicator& comm, const Tensor& send, const Tensor& recv, const Stream& stream);

  // Lists the front reuses from call to call (one thread drives a communicator); emptied when each call ends, by
  // return or by an error (EmptiedOnExit), so they hold no tensor between calls.
  std::vector<P2POp> p2p_ops_;
  std::vector<Tensor> send_blocks_;
  std::vector<Tensor> recv_blocks_;
  std::vector<std::int64_t> one_row_per_rank_;  // exchange_counts' row counts, made on first use
};

// The count exchange that precedes an all_to_all_v: `send` [size(), per_peer] (i64, on the communicator's
// device: CPU for MPI, the GPU for NCCL), row q going to rank q; `recv` (same shape) gets, in rank order, the row
// each peer sent this rank. An all_to_all_v of one row per peer.
WorkPtr exchange_counts(Communicator& comm, const Tensor& send, const Tensor& recv, const Stream& stream = cpu_stream());

// True when the byte ranges of a and b intersect (same storage only).
bool tensors_overlap(const Tensor& a, const Tensor& b);
// True when `part` is exactly block `index` of `whole` split into `blocks` equal parts.
bool is_block_of(const Tensor& part, const Tensor& whole, int index, int blocks);

// "[0,1,2,3]" or "[0..7]" for runs.
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace cleave::comm
