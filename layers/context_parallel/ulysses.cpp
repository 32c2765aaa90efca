// Ulysses all-to-all: head blocks exchanged for sequence chunks (see ulysses.hpp).
#include "layers/context_parallel/ulysses.hpp"

#include <array>
#include <span>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/comm_wait.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {
namespace {

Tensor comm_buffer(const Context& ctx, const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, MemoryCategory::kCommunication, *ctx.allocator);
}

// Column offsets of each part, per token: in the whole-head layout (H each) and in one rank's (H / cp each).
struct Parts {
  std::array<std::int64_t, kMaxParts> heads{}, whole_at{}, share_at{};
  std::size_t size = 0;
  std::int64_t whole = 0, share = 0;  // columns per token
};

// A per-peer list: in place for up to kInlinePeers peers, on the heap beyond.
template <typename T, std::size_t N = kInlinePeers>
class PeerList {
 public:
  explicit PeerList(std::size_t n) : n_(n) {
    if (n > N) heap_.resize(n);
  }
  T& operator[](std::size_t i) { return n_ > N ? heap_[i] : inline_[i]; }
  std::span<const T> first(std::size_t count) const {
    return {n_ > N ? heap_.data() : inline_.data(), count};
  }

 private:
  std::size_t n_;
  std::array<T, N> inline_{};
  std::vector<T> heap_;
};

Parts parts_of(const Context& ctx, std::initializer_list<std::int64_t> part_heads, std::int64_t hd, const char* what) {
  CLEAVE_ASSERT(ctx.cp_comm != nullptr && ctx.cp_comm->size() == ctx.cp.size && ctx.cp_comm->rank() == ctx.cp.rank,
                "{}: context parallel group missing or unlike the layout (cp {} rank {})", what, ctx.cp.size,
                ctx.cp.rank);
  CLEAVE_ASSERT(part_heads.size() <= kMaxParts, "{}: {} parts, at most {}", what, part_heads.size(), kMaxParts);
  Parts p;
  for (std::int64_t h : part_heads) {
    CLEAVE_CHECK(h % ctx.cp.size == 0,
                 "{}: {} local heads do not split over parallel.context_parallel_size {} (all_to_all needs the heads "
                 "and kv heads per tp rank divisible by cp; context_parallel_comm \"ring\" does not)",
                 what, h, ctx.cp.size);
    p.heads[p.size] = h;
    p.whole_at[p.size] = p.whole;
    p.share_at[p.size] = p.share;
    ++p.size;
    p.whole += h * hd;
    p.share += h / ctx.cp.size * hd;
  }
  return p;
}

// Sends send[j] to peer j and receives recv[j] from it, for every peer j != own (send[own] is recv[own]). On
// ctx.stream, the packing's stream: the communicator orders the transfer after it (communicator.hpp).
void exchange(Context& ctx, PeerList<Tensor>& send, PeerList<Tensor>& recv) {
  const auto peers = static_cast<std::size_t>(ctx.cp.size);
  PeerList<comm::P2POp, 2 * kInlinePeers> ops(2 * peers);
  std::size_t n = 0;
  for (int j = 0; j < ctx.cp.size; ++j) {
    if (j == ctx.cp.rank) continue;
    ops[n++] = comm::P2POp::recv(recv[static_cast<std::size_t>(j)], j);
    ops[n++] = comm::P2POp::send(send[static_cast<std::size_t>(j)], j);
  }
  const CommWaitTimer timer(ctx, CommKind::kContextParallel);
  ctx.cp_comm->batch_p2p(ops.first(n), *ctx.stream)->wait();
}

}  // namespace

Tensor seq_to_heads(Context& ctx, const Tensor& x, std::initializer_list<std::int64_t> part_heads, std::int64_t hd) {
  const Parts p = parts_of(ctx, part_heads, hd, "all_to_all (sequence to heads)");
  const int cp = ctx.cp.size;
  CLEAVE_ASSERT(x.rank() == 3 && x.dim(2) == p.whole, "seq_to_heads: {} is not [B, Tl, {}]", x.shape().str(), p.whole);
  const std::int64_t b = x.dim(0), tl = x.dim(1), w = p.share;
  PeerList<Tensor> send(static_cast<std::size_t>(cp)), recv(static_cast<std::size_t>(cp));
  for (int j = 0; j < cp; ++j) {
    Tensor& s = send[static_cast<std::size_t>(j)];
    s = comm_buffer(ctx, Shape{b, tl, w}, x.dtype());
    for (std::size_t k = 0; k < p.size; ++k) {  // head block j of part k, every token
      const std::int64_t cols = p.heads[k] / cp * hd;
      ops::copy_2d(ctx, x, s, {b * tl, cols, p.whole_at[k] + j * cols, p.whole, p.share_at[k], w});
    }
    recv[static_cast<std::size_t>(j)] = j == ctx.cp.rank ? s : comm_buffer(ctx, Shape{b, tl, w}, x.dtype());
  }
  exchange(ctx, send, recv);
  Tensor out = new_activation(ctx, Shape{b, tl * cp, w}, x.dtype());
  for (int i = 0; i < cp; ++i) {  // rank i's tokens are chunk i of every sample
    ops::copy_2d(ctx, recv[static_cast<std::size_t>(i)], out, {b, tl * w, 0, tl * w, i * tl * w, cp * tl * w});
  }
  return out;
}

Tensor heads_to_seq(Context& ctx, const Tensor& y, std::initializer_list<std::int64_t> part_heads, std::int64_t hd) {
  const Parts p = parts_of(ctx, part_heads, hd, "all_to_all (heads to sequence)");
  const int cp = ctx.cp.size;
  const std::int64_t w = p.share;
  CLEAVE_ASSERT(y.rank() == 3 && y.dim(2) == w && y.dim(1) % cp == 0, "heads_to_seq: {} is not [B, T, {}]",
                y.shape().str(), w);
  const std::int64_t b = y.dim(0), tl = y.dim(1) / cp;
  PeerList<Tensor> send(static_cast<std::size_t>(cp)), recv(static_cast<std::size_t>(cp));
  for (int i = 0; i < cp; ++i) {
    Tensor& s = send[static_cast<std::size_t>(i)];
    s = comm_buffer(ctx, Shape{b, tl, w}, y.dtype());
    ops::copy_2d(ctx, y, s, {b, tl * w, i * tl * w, cp * tl * w, 0, tl * w});
    recv[static_cast<std::size_t>(i)] = i == ctx.cp.rank ? s : comm_buffer(ctx, Shape{b, tl, w}, y.dtype());
  }
  exchange(ctx, send, recv);
  Tensor out = new_activation(ctx, Shape{b, tl, p.whole}, y.dtype());
  for (int j = 0; j < cp; ++j) {  // peer j computed head block j of every part
    for (std::size_t k = 0; k < p.size; ++k) {
      const std::int64_t cols = p.heads[k] / cp * hd;
      ops::copy_2d(ctx, recv[static_cast<std::size_t>(j)], out, {b * tl, cols, p.share_at[k], w, p.whole_at[k] + j * cols, p.whole});
    }
  }
  return out;
}

}  // namespace cleave::layers
