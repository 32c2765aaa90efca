// Ring attention: blocks of keys and values rotated around the cp group, partial results merged by their
// log-sum-exp (see ring_attention.hpp).
#include "layers/context_parallel/ring_attention.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/comm_wait.hpp"
#include "layers/layer_util.hpp"

namespace cleave::layers {
namespace {

// The block attention with log-sum-exp ring attention is built on: the seam's memory-efficient attention
// (ops::attention_forward / attention_backward / attention_merge, docs/ops.md "Attention").
using BlockParams = ops::AttentionParams;

constexpr int kChunks = 2;

// Columns [col, col + cols) of tokens [tok, tok + n) of every sample of x [B, Tl, W], as a new [B, n, cols] in
// `dtype` (x's, or widened / rounded on the way, copy's bits): one copy_3d, whatever B.
Tensor take(const Context& ctx, const Tensor& x, std::int64_t col, std::int64_t cols, std::int64_t tok, std::int64_t n,
            DType dtype, MemoryCategory category = MemoryCategory::kActivations) {
  const std::int64_t b = x.dim(0), tl = x.dim(1), w = x.dim(2);
  Tensor out = Tensor::empty(Shape{b, n, cols}, dtype, category, *ctx.allocator);
  ops::copy_3d(ctx, x, out, {b, n, cols, tok * w + col, tl * w, w, 0, n * cols, cols});
  return out;
}

// The inverse: part [B, n, cols] into columns [col, ...) of tokens [tok, ...) of x [B, Tl, W], converted to x's
// dtype on the way when part's differs (the f32 accumulators rounded as copy rounds): one copy_3d.
void put(const Context& ctx, const Tensor& part, const Tensor& x, std::int64_t col, std::int64_t tok) {
  const std::int64_t b = x.dim(0), tl = x.dim(1), w = x.dim(2), n = part.dim(1), cols = part.dim(2);
  ops::copy_3d(ctx, part, x, {b, n, cols, 0, n * cols, cols, tok * w + col, tl * w, w});
}

struct Geometry {
  int cp = 1, rank = 0;
  std::int64_t b = 0, c = 0;  // batch, chunk length
  std::int64_t hq = 0, hkv = 0, hd = 0;
  std::int64_t window = 0;  // sliding window in keys, 0: none
  bool bf16 = false;        // the blocks hold bf16 values (widened): device.precision bf16
  std::int64_t q_cols() const { return hq * hd; }
  std::int64_t kv_cols() const { return hkv * hd; }
  // Global chunk index of chunk k (0 or 1) of rank `of`.
  int chunk(int of, int k) const { return k == 0 ? of : 2 * cp - 1 - of; }
};

Geometry geometry(const Context& ctx, std::int64_t b, std::int64_t tl, const RingHeads& h, const std::string& who) {
  CLEAVE_ASSERT(ctx.cp_comm != nullptr && ctx.cp_comm->size() == ctx.cp.size && ctx.cp_comm->rank() == ctx.cp.rank,
                "{}: ring attention without its cp group", who);
  CLEAVE_CHECK(tl % kChunks == 0, "{}: ring attention needs an even number of local tokens, got {}", who, tl);
  CLEAVE_ASSERT(h.window >= 0, "{}: sliding window {} must be >= 0", who, h.window);
  return {ctx.cp.size, ctx.cp.rank, b, tl / kChunks, h.q_heads, h.kv_heads, h.head_dim, h.window,
          ctx.compute_dtype() == DType::kBF16};
}

BlockParams block_params(const Geometry& g, int q_chunk, int k_chunk) {
  BlockParams p;
  p.bf16_roundings = g.bf16;  // the widened blocks rounded inside as one rank's bf16 attention rounds
  p.q_heads = g.hq;
  p.kv_heads = g.hkv;
  p.q_offset = q_chunk * g.c;
  p.k_offset = k_chunk * g.c;
  p.causal = true;  // the diagonal block masks; an earlier chunk is wholly visible without a window
  p.window = g.window;  // over the global positions the offsets give
  return p;
}

// Keys and values of one rank in flight: two chunks each.
struct KvBlocks {
  std::array<Tensor, kChunks> k, v;
};

KvBlocks empty_like(const Context& ctx, const KvBlocks& like) {
  KvBlocks out;
  for (int m = 0; m < kChunks; ++m) {
    out.k[m] = Tensor::empty(like.k[m].shape(), like.k[m].dtype(), MemoryCategory::kCommunication, *ctx.allocator);
    out.v[m] = Tensor::empty(like.v[m].shape(), like.v[m].dtype(), MemoryCategory::kCommunication, *ctx.allocator);
  }
  return out;
}

// The four blocks a rotation moves: k and v of both chunks.
using FlatBlocks = std::array<Tensor, 2 * kChunks>;
FlatBlocks flat(const KvBlocks& kv) { return {kv.k[0], kv.k[1], kv.v[0], kv.v[1]}; }

// Posts this rank's `send` to rank + 1 and the receive of rank - 1's into `recv`; returns the Work.
comm::WorkPtr rotate(Context& ctx, const FlatBlocks& send, const FlatBlocks& recv) {
  const CommWaitTimer timer(ctx, CommKind::kContextParallel);  // the posting
  const int cp = ctx.cp.size, next = (ctx.cp.rank + 1) % cp, prev = (ctx.cp.rank + cp - 1) % cp;
  std::array<comm::P2POp, 2 * (2 * kChunks)> ops;  // in place: a rotation allocates nothing
  for (std::size_t i = 0; i < recv.size(); ++i) ops[i] = comm::P2POp::recv(recv[i], prev, static_cast<int>(i));
  for (std::size_t i = 0; i < send.size(); ++i) {
    ops[recv.size() + i] = comm::P2POp::send(send[i], next, static_cast<int>(i));
  }
  return ctx.cp_comm->batch_p2p(std::span<const comm::P2POp>(ops), *ctx.stream);
}

// x in `dtype`: x itself when it already is (an fp32 run makes no copy), else a converted copy in `category`.
Tensor converted(const Context& ctx, const Tensor& x, DType dtype, MemoryCategory category) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, category, *ctx.allocator);
  ops::copy(ctx, x, out);
  return out;
}

// x in f32 for the ring's f32 accumulation (docs/ops.md: bf16 operands, f32 accumulation).
Tensor widened(const Context& ctx, const Tensor& x) {
  return converted(ctx, x, DType::kF32, MemoryCategory::kWorkspace);
}

KvBlocks widened(const Context& ctx, const KvBlocks& kv) {
  KvBlocks out;
  for (int m = 0; m < kChunks; ++m) out.k[m] = widened(ctx, kv.k[m]), out.v[m] = widened(ctx, kv.v[m]);
  return out;
}

// Whether query chunk gi attends key chunk gj at all: not wholly in its future (causal) and, with a sliding
// window, its nearest key (the last of gj) within the window of gi's first query: (gi - gj - 1)·c + 1 < w.
bool visible(const Geometry& g, int gi, int gj) {
  if (gj > gi) return false;
  if (gj == gi || g.window <= 0) return true;
  return static_cast<std::int64_t>(gi - gj - 1) * g.c + 1 < g.window;
}

// Calls visit(k, m, params) for every pair of this rank's query chunk k and key chunk m of the block from rank
// `src` whose keys the queries see (visible), with that pair's kernel parameters; query chunks outer, in order.
template <typename Visit>
void for_each_visible_pair(const Geometry& g, int src, Visit visit) {
  for (int k = 0; k < kChunks; ++k) {
    const int gi = g.chunk(g.rank, k);
    for (int m = 0; m < kChunks; ++m) {
      const int gj = g.chunk(src, m);
      if (visible(g, gi, gj)) visit(k, m, block_params(g, gi, gj));
    }
  }
}

struct ForwardResult {
  std::array<Tensor, kChunks> q, out, lse;
  KvBlocks own;
};

ForwardResult run_forward(Context& ctx, const Tensor& qkv, const RingHeads& h, const std::string& who) {
  const Geometry g = geometry(ctx, qkv.dim(0), qkv.dim(1), h, who);
  CLEAVE_ASSERT(qkv.dim(2) == g.q_cols() + 2 * g.kv_cols(), "{}: qkv {} is not q | k | v of {} + 2 × {} heads", who,
                qkv.shape().str(), g.hq, g.hkv);
  ForwardResult r;
  // The blocks run and merge in f32: the queries widened, the outputs accumulated in f32 and rounded once at the
  // end (under fp32 these are r.q and r.out themselves).
  std::array<Tensor, kChunks> q32, out32;
  for (int k = 0; k < kChunks; ++k) {
    r.q[k] = take(ctx, qkv, 0, g.q_cols(), k * g.c, g.c, qkv.dtype());
    r.own.k[k] = take(ctx, qkv, g.q_cols(), g.kv_cols(), k * g.c, g.c, qkv.dtype());
    r.own.v[k] = take(ctx, qkv, g.q_cols() + g.kv_cols(), g.kv_cols(), k * g.c, g.c, qkv.dtype());
    q32[k] = widened(ctx, r.q[k]);
    out32[k] = new_activation(ctx, Shape{g.b, g.c, g.q_cols()}, DType::kF32);
    r.lse[k] = new_activation(ctx, Shape{g.b, g.hq, g.c}, DType::kF32);
    ops::fill(ctx, out32[k], 0.0f);
    ops::fill(ctx, r.lse[k], -std::numeric_limits<float>::infinity());
  }
  const Tensor part_out = new_workspace(ctx, Shape{g.b, g.c, g.q_cols()}, DType::kF32);
  const Tensor part_lse = new_workspace(ctx, Shape{g.b, g.hq, g.c}, DType::kF32);
  KvBlocks held = r.own;
  for (int step = 0; step < g.cp; ++step) {
    const int src = (g.rank - step + g.cp) % g.cp;
    KvBlocks next;
    comm::WorkPtr in_flight;
    if (step + 1 < g.cp) {  // the next block travels while this one computes
      next = empty_like(ctx, held);
      in_flight = rotate(ctx, flat(held), flat(next));
    }
    const KvBlocks held32 = widened(ctx, held);
    for_each_visible_pair(g, src, [&](int k, int m, const BlockParams& p) {
      ops::attention_forward(ctx, q32[k], held32.k[m], held32.v[m], part_out, part_lse, p);
      ops::attention_merge(ctx, out32[k], r.lse[k], part_out, part_lse, out32[k], r.lse[k]);
    });
    if (in_flight) {
      const CommWaitTimer timer(ctx, CommKind::kContextParallel);
      in_flight->wait();
      held = next;
    }
  }
  for (int k = 0; k < kChunks; ++k) {
    r.out[k] = converted(ctx, out32[k], ctx.compute_dtype(), MemoryCategory::kActivations);
  }
  return r;
}

Tensor assemble_out(Context& ctx, const ForwardResult& r) {
  const std::int64_t b = r.out[0].dim(0), c = r.out[0].dim(1), w = r.out[0].dim(2);
  Tensor out = new_activation(ctx, Shape{b, kChunks * c, w}, r.out[0].dtype());
  for (int k = 0; k < kChunks; ++k) put(ctx, r.out[k], out, 0, k * c);
  return out;
}

// The forward's tensors the backward reads: recomputed from the stashed qkv, or the stashed ones themselves.
ForwardResult stashed_forward(Context& ctx, const RingHeads& heads, bool recompute, const Stash& stash,
                              const std::string& who) {
  if (recompute) return run_forward(ctx, stash_at(stash, 0, who), heads, who);
  ForwardResult r;
  for (int k = 0; k < kChunks; ++k) {
    r.q[k] = stash_at(stash, static_cast<std::size_t>(k), who);
    r.own.k[k] = stash_at(stash, static_cast<std::size_t>(2 + k), who);
    r.own.v[k] = stash_at(stash, static_cast<std::size_t>(4 + k), who);
    r.out[k] = stash_at(stash, static_cast<std::size_t>(6 + k), who);
    r.lse[k] = stash_at(stash, static_cast<std::size_t>(8 + k), who);
  }
  return r;
}

// What the backward holds from its first step to the assembly of dqkv. In f32 like the forward: q, out, dout
// widened (the stashed out is the rounded one the layer returned, as a one-rank run's backward reads it); dq and
// the travelling dK/dV accumulate in f32 and are rounded once at home.
struct BackwardState {
  std::array<Tensor, kChunks> d_out, dq, q32, out32;
  KvBlocks dkv;  // the gradient of the held block, travelling with it
};

BackwardState backward_state(Context& ctx, const Tensor& dout, const ForwardResult& r, const Geometry& g) {
  BackwardState s;
  for (int k = 0; k < kChunks; ++k) {
    // Widened as it is taken (the category widened() gives it: the workspace under bf16, under fp32 the chunk).
    s.d_out[k] = take(ctx, dout, 0, g.q_cols(), k * g.c, g.c, DType::kF32,
                      g.bf16 ? MemoryCategory::kWorkspace : MemoryCategory::kActivations);
    s.q32[k] = widened(ctx, r.q[k]);
    s.out32[k] = widened(ctx, r.out[k]);
    s.dq[k] = new_activation(ctx, r.q[k].shape(), DType::kF32);
    ops::fill(ctx, s.dq[k], 0.0f);
    s.dkv.k[k] = Tensor::empty(r.own.k[k].shape(), DType::kF32, MemoryCategory::kCommunication, *ctx.allocator);
    s.dkv.v[k] = Tensor::empty(r.own.v[k].shape(), DType::kF32, MemoryCategory::kCommunication, *ctx.allocator);
    ops::fill(ctx, s.dkv.k[k], 0.0f);
    ops::fill(ctx, s.dkv.v[k], 0.0f);
  }
  return s;
}

// `dkv` sent on to rank + 1 once this rank has added to it, and rank - 1's received in its place (after cp hops
// a block's gradient is home).
KvBlocks pass_on(Context& ctx, const KvBlocks& dkv) {
  KvBlocks dkv_next = empty_like(ctx, dkv);
  const comm::WorkPtr hop = rotate(ctx, flat(dkv), flat(dkv_next));
  const CommWaitTimer timer(ctx, CommKind::kContextParallel);
  hop->wait();
  return dkv_next;
}

// Ring step `step`: the next block posted, the gradients of every visible pair with the `held` block (from rank
// - step) added to dq and to the block's travelling dK/dV, those passed on, and `held` replaced by the next block.
void backward_step(Context& ctx, const Geometry& g, int step, const ForwardResult& r, BackwardState& s,
                   KvBlocks& held) {
  const int src = (g.rank - step + g.cp) % g.cp;
  KvBlocks next;
  comm::WorkPtr in_flight;
  if (step + 1 < g.cp) {
    next = empty_like(ctx, held);
    in_flight = rotate(ctx, flat(held), flat(next));
  }
  const KvBlocks held32 = widened(ctx, held);
  for_each_visible_pair(g, src, [&](int k, int m, BlockParams p) {
    p.accumulate_grads = true;
    ops::attention_backward(ctx, s.q32[k], held32.k[m], held32.v[m], s.out32[k], r.lse[k], s.d_out[k], s.dq[k],
                            s.dkv.k[m], s.dkv.v[m], p);
  });
  s.dkv = pass_on(ctx, s.dkv);
  if (in_flight) {
    const CommWaitTimer timer(ctx, CommKind::kContextParallel);
    in_flight->wait();
    held = next;
  }
}

// dq, dK and dV of both chunks rounded to `dtype` as they are placed (put converts) in one [B, Tl, q | k | v]
// gradient of qkv.
Tensor assemble_dqkv(Context& ctx, const Geometry& g, const BackwardState& s, DType dtype) {
  const std::int64_t tl = kChunks * g.c;
  Tensor dqkv = new_activation(ctx, Shape{g.b, tl, g.q_cols() + 2 * g.kv_cols()}, dtype);
  for (int k = 0; k < kChunks; ++k) {
    put(ctx, s.dq[k], dqkv, 0, k * g.c);
    put(ctx, s.dkv.k[k], dqkv, g.q_cols(), k * g.c);
    put(ctx, s.dkv.v[k], dqkv, g.q_cols() + g.kv_cols(), k * g.c);
  }
  return dqkv;
}

}  // namespace

Tensor ring_attention_forward(Context& ctx, const Tensor& qkv, const RingHeads& heads, bool recompute, Stash& stash,
                              const std::string& who) {
  ForwardResult r = run_forward(ctx, qkv, heads, who);
  Tensor out = assemble_out(ctx, r);
  if (recompute) {
    stash.tensors = {qkv};
  } else {
    stash.tensors = {r.q[0], r.q[1], r.own.k[0], r.own.k[1], r.own.v[0], r.own.v[1],
                     r.out[0], r.out[1], r.lse[0], r.lse[1]};
  }
  return out;
}

// The forward's tensors and the backward's working set live to the end (the memory plan counts them so).
Tensor ring_attention_backward(Context& ctx, const Tensor& dout, const RingHeads& heads, bool recompute, Stash& stash,
                               const std::string& who) {
  const ForwardResult r = stashed_forward(ctx, heads, recompute, stash, who);
  stash.tensors.clear();
  const Geometry g = geometry(ctx, dout.dim(0), dout.dim(1), heads, who);
  BackwardState s = backward_state(ctx, dout, r, g);
  KvBlocks held = r.own;
  for (int step = 0; step < g.cp; ++step) backward_step(ctx, g, step, r, s, held);
  return assemble_dqkv(ctx, g, s, dout.dtype());
}

}  // namespace cleave::layers
