// Argument checks shared by every backend (communicator.hpp), so a backend sees only well-formed calls and
// every backend rejects a bad call with the same message.
#include "engine/comm/communicator.hpp"

#include <algorithm>

namespace cleave::comm {
namespace {

// "all_reduce on mpi comm 'world/dp' (rank 1 of 4)" (Communicator::where), formatted only when a check fails.
struct At {
  const Communicator& comm;
  std::string_view op;
};

// Empties a reused list when a call ends, by return or by an argument error: the list holds no tensor (and keeps
// no storage, nor its allocator's lifetime) between calls.
template <class T>
struct EmptiedOnExit {
  std::vector<T>& list;
  ~EmptiedOnExit() { list.clear(); }
};

}  // namespace
}  // namespace cleave::comm

template <>
struct fmt::formatter<cleave::comm::At> : fmt::formatter<std::string_view> {
  auto format(const cleave::comm::At& at, fmt::format_context& ctx) const {
    return fmt::format_to(ctx.out(), "{} on {} comm '{}' (rank {} of {})", at.op, at.comm.backend(), at.comm.name(),
                          at.comm.rank(), at.comm.size());
  }
};

namespace cleave::comm {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::string Communicator::where(std::string_view op) const { return fmt::format("{}", At{*this, op}); }

bool tensors_overlap(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.storage() != b.storage() || a.nbytes() == 0 || b.nbytes() == 0) {
    return false;
  }
  const auto* pa = static_cast<const char*>(a.raw_data());
  const auto* pb = static_cast<const char*>(b.raw_data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

bool is_block_of(const Tensor& part, const Tensor& whole, int index, int blocks) {
  if (!part.defined() || !whole.defined() || part.storage() != whole.storage() || part.dtype() != whole.dtype() ||
      part.numel() * blocks != whole.numel()) {
    return false;
  }
  const auto* base = static_cast<const char*>(whole.raw_data());
  return static_cast<const char*>(part.raw_data()) == base + static_cast<std::size_t>(index) * part.nbytes();
}

std::string format_ranks(const std::vector<int>& ranks) {
  std::string out = "[";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ",";
    if (j >= i + 2) {
      out += fmt::format("{}..{}", ranks[i], ranks[j]);
    } else {
      out += fmt::format("{}", ranks[i]);
      if (j == i + 1) out += fmt::format(",{}", ranks[j]);
    }
    i = j + 1;
  }
  return out + "]";
}

namespace {
void check_defined(const Tensor& t, const At& where, std::string_view what) {
  CLEAVE_CHECK(t.defined(), "{}: {} tensor is undefined", where, what);
}
}  // namespace

std::unique_ptr<Communicator> Communicator::split(int color, int key, std::string_view name) {
  std::string label = name.empty() ? fmt::format("split(color={})", color) : std::string(name);
  return split_impl(color, key, this->name() + "/" + label);
}

WorkPtr Communicator::all_reduce(const Tensor& tensor, ReduceOp op, const Stream& stream) {
  const At at{*this, "all_reduce"};
  check_defined(tensor, at, "the");
  if (tensor.numel() == 0) return std::make_unique<CompletedWork>();
  return all_reduce_impl(tensor, op, stream);
}

namespace {

// The shared checks of reduce_scatter and all_gather: `whole` holds size() blocks of `block`'s size, same
// dtype and device; the two may overlap only as block `index` of `whole` (the in-place form).
void check_block_pair(const At& at, const Tensor& whole, const char* whole_name, const Tensor& block,
                      const char* block_name, int index, int blocks) {
  check_defined(whole, at, whole_name);
  check_defined(block, at, block_name);
  CLEAVE_CHECK(whole.dtype() == block.dtype(), "{}: {} is {} but {} is {}", at, whole_name,
               dtype_name(whole.dtype()), block_name, dtype_name(block.dtype()));
  CLEAVE_CHECK(whole.device() == block.device(), "{}: {} on {} but {} on {}", at, whole_name, whole.device().str(),
               block_name, block.device().str());
  CLEAVE_CHECK(block.numel() * blocks == whole.numel(), "{}: {} {} has {} elements, expected {} {} elements × {} ranks = {}",
               at, whole_name, whole.shape().str(), whole.numel(), block_name, block.numel(), blocks,
               block.numel() * blocks);
  CLEAVE_CHECK(!tensors_overlap(whole, block) || is_block_of(block, whole, index, blocks),
               "{}: {} overlaps the {} other than as the {}'s block {} (the only in-place form)", at, block_name,
               whole_name, whole_name, index);
}

}  // namespace

WorkPtr Communicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op, const Stream& stream) {
  check_block_pair(At{*this, "reduce_scatter"}, input, "input", output, "output", rank(), size());
  if (output.numel() == 0) return std::make_unique<CompletedWork>();
  return reduce_scatter_impl(input, output, op, stream);
}

WorkPtr Communicator::all_gather(const Tensor& input, const Tensor& output, const Stream& stream) {
  check_block_pair(At{*this, "all_gather"}, output, "output", input, "input", rank(), size());
  if (input.numel() == 0) return std::make_unique<CompletedWork>();
  return all_gather_impl(input, output, stream);
}

WorkPtr Communicator::broadcast(const Tensor& tensor, int root, const Stream& stream) {
  const At at{*this, "broadcast"};
  check_defined(tensor, at, "the");
  CLEAVE_CHECK(root >= 0 && root < size(), "{}: root {} is not a rank of this communicator (0..{})", at, root,
               size() - 1);
  if (tensor.numel() == 0) return std::make_unique<CompletedWork>();
  return broadcast_impl(tensor, root, stream);
}

WorkPtr Communicator::barrier(const Stream& stream) { return barrier_impl(stream); }

WorkPtr Communicator::batch_p2p(std::span<const P2POp> ops, const Stream& stream) {
  const At at{*this, "batch_p2p"};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const char* kind = op.kind == P2PKind::kSend ? "send" : "recv";
    CLEAVE_CHECK(op.tensor.defined(), "{}: op {} ({} peer {}) has an undefined tensor", at, i, kind, op.peer);
    CLEAVE_CHECK(op.peer >= 0 && op.peer < size(), "{}: op {} ({}) names peer {}, not a rank of this communicator "
                 "(0..{})", at, i, kind, op.peer, size() - 1);
    CLEAVE_CHECK(op.tag >= 0, "{}: op {} ({} peer {}) has negative tag {}", at, i, kind, op.peer, op.tag);
    if (op.kind == P2PKind::kRecv) {
      for (std::size_t j = 0; j < ops.size(); ++j) {
        CLEAVE_CHECK(j == i || !tensors_overlap(op.tensor, ops[j].tensor),
                     "{}: op {} (recv from peer {}) overlaps the tensor of op {}", at, i, op.peer, j);
      }
    }
  }
  // Receives first (a self-send then finds its receive already posted, and big exchanges start sooner), each kind
  // in the caller's order, empty tensors left out.
  p2p_ops_.clear();
  const EmptiedOnExit<P2POp> emptied{p2p_ops_};
  for (const P2PKind kind : {P2PKind::kRecv, P2PKind::kSend}) {
    for (const P2POp& op : ops) {
      if (op.kind == kind && op.tensor.numel() > 0) p2p_ops_.push_back(op);
    }
  }
  if (p2p_ops_.empty()) return std::make_unique<CompletedWork>();
  return batch_p2p_impl(p2p_ops_, stream);
}

WorkPtr Communicator::all_to_all_v(const Tensor& send, std::span<const std::int64_t> send_rows, const Tensor& recv,
                                   std::span<const std::int64_t> recv_rows, const Stream& stream) {
  const At at{*this, "all_to_all_v"};
  check_defined(send, at, "the send");
  check_defined(recv, at, "the receive");
  const auto n = static_cast<std::size_t>(size());
  CLEAVE_CHECK(send_rows.size() == n && recv_rows.size() == n, "{}: {} send and {} receive counts for {} ranks", at,
               send_rows.size(), recv_rows.size(), n);
  CLEAVE_CHECK(send.dtype() == recv.dtype(), "{}: send is {} but receive is {}", at, dtype_name(send.dtype()),
               dtype_name(recv.dtype()));
  CLEAVE_CHECK(send.device() == recv.device(), "{}: send on {} but receive on {}", at, send.device().str(),
               recv.device().str());
  CLEAVE_CHECK(send.rank() >= 1 && recv.rank() >= 1, "{}: send {} and receive {} need a row dimension", at,
               send.shape().str(), recv.shape().str());
  const std::int64_t width = send.dim(0) > 0 ? send.numel() / send.dim(0) : -1;
  const std::int64_t recv_width = recv.dim(0) > 0 ? recv.numel() / recv.dim(0) : -1;
  CLEAVE_CHECK(width < 0 || recv_width < 0 || width == recv_width, "{}: send rows of {} elements, receive rows of {}",
               at, width, recv_width);
  CLEAVE_CHECK(!tensors_overlap(send, recv), "{}: send and receive overlap", at);
  const auto cut = [&](const Tensor& t, std::span<const std::int64_t> rows, const char* what,
                       std::vector<Tensor>& blocks) {
    std::int64_t total = 0;
    for (std::size_t q = 0; q < n; ++q) {
      CLEAVE_CHECK(rows[q] >= 0, "{}: {} count for rank {} is {}", at, what, q, rows[q]);
      total += rows[q];
    }
    CLEAVE_CHECK(total == t.dim(0), "{}: {} counts sum to {} rows but the tensor {} has {}", at, what, total,
                 t.shape().str(), t.dim(0));
    blocks.clear();
    std::int64_t first = 0;
    for (std::size_t q = 0; q < n; ++q) {
      blocks.push_back(t.slice(first, first + rows[q]));
      first += rows[q];
    }
  };
  const EmptiedOnExit<Tensor> send_emptied{send_blocks_};
  const EmptiedOnExit<Tensor> recv_emptied{recv_blocks_};
  cut(send, send_rows, "send", send_blocks_);
  cut(recv, recv_rows, "receive", recv_blocks_);
  if (send.numel() == 0 && recv.numel() == 0) return std::make_unique<CompletedWork>();
  return all_to_all_v_impl(send_blocks_, recv_blocks_, stream);
}

WorkPtr Communicator::all_to_all_v_impl(std::span<const Tensor> send_blocks, std::span<const Tensor> recv_blocks,
                                        const Stream& stream) {
  p2p_ops_.clear();  // receives first (batch_p2p_impl's contract), empty blocks left out
  const EmptiedOnExit<P2POp> emptied{p2p_ops_};
  for (std::size_t p = 0; p < recv_blocks.size(); ++p) {
    if (recv_blocks[p].numel() > 0) p2p_ops_.push_back(P2POp::recv(recv_blocks[p], static_cast<int>(p)));
  }
  for (std::size_t q = 0; q < send_blocks.size(); ++q) {
    if (send_blocks[q].numel() > 0) p2p_ops_.push_back(P2POp::send(send_blocks[q], static_cast<int>(q)));
  }
  if (p2p_ops_.empty()) return std::make_unique<CompletedWork>();
  return batch_p2p_impl(p2p_ops_, stream);
}

WorkPtr exchange_counts(Communicator& comm, const Tensor& send, const Tensor& recv, const Stream& stream) {
  CLEAVE_CHECK(send.defined() && recv.defined() && send.dtype() == DType::kI64 && send.rank() == 2 &&
                   send.dim(0) == comm.size() && recv.shape() == send.shape() && recv.dtype() == DType::kI64,
               "exchange_counts on comm '{}' of {} ranks: send and receive must be i64 [{}, per_peer]", comm.name(),
               comm.size(), comm.size());
  comm.one_row_per_rank_.assign(static_cast<std::size_t>(comm.size()), 1);  // within capacity after the first call
  return comm.all_to_all_v(send, comm.one_row_per_rank_, recv, comm.one_row_per_rank_, stream);
}

}  // namespace cleave::comm
