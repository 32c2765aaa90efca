// The cp attention core's work beyond one rank's ÷ cp (see cp_core_work.hpp), call by call as the layers run it.
#include "partition/cp_core_work.hpp"

#include <algorithm>
#include <vector>

#include "engine/core/error.hpp"
#include "partition/cost_parts.hpp"
#include "partition/families/family.hpp"
#include "partition/work_parts.hpp"

namespace cleave::partition {
namespace {

using D = double;
constexpr D kF32 = 4;

struct Core {
  D b = 0, t = 0, tl = 0, c = 0, hq = 0, hkv = 0, hd = 0, q = 0, k = 0, s = 0;
  int cp = 1;
  std::int64_t window = 0, chunk = 0;
  bool bf16 = false;
};

// A copy of n elements read in `from` bytes and written in `to` bytes, in `kernels` launches.
void copy(PassWork& p, D n, D from, D to, D kernels) {
  p.stream_bytes += n * (from + to);
  p.kernels += kernels;
}

// The attention calls one ring rank makes over a pass: the visible query/key pairs of each call (the busiest rank's:
// every rank's without a window).
std::vector<D> ring_calls(const Core& x) {
  std::vector<D> busiest;
  D most = -1;
  for (int r = 0; r < x.cp; ++r) {
    std::vector<D> calls;
    D total = 0;
    for (int step = 0; step < x.cp; ++step) {
      const int src = (r - step + x.cp) % x.cp;
      for (int qi : {r, 2 * x.cp - 1 - r}) {
        for (int kj : {src, 2 * x.cp - 1 - src}) {
          const D pairs = ring_chunk_pairs(x.chunk, qi, kj, x.window);
          if (pairs <= 0) continue;
          calls.push_back(pairs);
          total += pairs;
        }
      }
    }
    if (total > most) most = total, busiest = calls;
  }
  return busiest;
}

// run_forward: the chunk copies of q, k, v, the f32 accumulators' fills, each step's block widened (bf16), each call
// and its merge, and the output rounded (bf16); with `assemble`, the output's chunks put back in token order.
CpCorePass ring_forward(const Core& x, const std::vector<D>& calls, bool assemble) {
  CpCorePass p;
  PassWork& e = p.extra;
  copy(e, x.b * x.tl * (x.q + 2 * x.k), x.s, x.s, 2 * 3);        // take q, k, v of 2 chunks: one copy_3d each
  if (x.bf16) copy(e, x.b * x.tl * x.q, x.s, kF32, 2);            // q widened
  copy(e, x.b * x.tl * (x.q + x.hq), 0, kF32, 4);                 // out32 = 0, lse = -inf
  if (x.bf16) copy(e, x.cp * x.b * x.tl * 2 * x.k, x.s, kF32, 4 * x.cp);  // each step's K, V chunks widened
  for (const D pairs : calls) {
    PassWork call = work_parts::attention_forward(x.b * x.hq, x.c, x.hd, kF32, pairs);
    p.products.gemms.insert(p.products.gemms.end(), call.gemms.begin(), call.gemms.end());
    e.stream_bytes += call.stream_bytes + 3 * x.b * x.c * (x.q + x.hq) * kF32;  // its part_out / lse; the merge
    e.kernels += call.kernels + 1;
  }
  if (x.bf16) copy(e, x.b * x.tl * x.q, kF32, x.s, 2);  // out rounded
  if (assemble) copy(e, x.b * x.tl * x.q, x.s, x.s, 2);         // one copy_3d per chunk
  return p;
}

// ring_attention_backward after its forward's tensors: dout's chunks taken in f32 (widened on the way under bf16),
// q and out widened (bf16), the fills of dq and the travelling dK/dV, each step's block widened (bf16), each call
// (accumulating), and dqkv assembled from the f32 accumulators (rounded on the way under bf16).
CpCorePass ring_backward(const Core& x, const std::vector<D>& calls) {
  CpCorePass p;
  PassWork& e = p.extra;
  copy(e, x.b * x.tl * x.q, x.s, kF32, 2);                        // take dout's chunks in f32: one copy_3d each
  if (x.bf16) copy(e, 2 * x.b * x.tl * x.q, x.s, kF32, 4);        // q, out widened
  copy(e, x.b * x.tl * (x.q + 2 * x.k), 0, kF32, 6);              // dq, dK, dV = 0
  if (x.bf16) copy(e, x.cp * x.b * x.tl * 2 * x.k, x.s, kF32, 4 * x.cp);
  for (const D pairs : calls) {
    PassWork call = work_parts::attention_backward(x.b * x.hq, x.c, x.hd, kF32, pairs);
    p.products.gemms.insert(p.products.gemms.end(), call.gemms.begin(), call.gemms.end());
    e.stream_bytes += call.stream_bytes + 2 * x.b * x.c * (x.q + 2 * x.k) * kF32;  // dq, dK, dV read and written
    e.kernels += call.kernels;
  }
  e.stream_bytes -= x.b * x.tl * (x.q + 2 * x.k) * x.s;  // what one rank's kernel writes of dqkv, its share
  copy(e, x.b * x.tl * (x.q + 2 * x.k), kF32, x.s, 6);  // dq, dK, dV put into dqkv (rounded): one copy_3d each
  return p;
}

// One all-to-all's packing and unpacking of a tensor of `w` columns per token in `parts` head groups.
void permutes(const Core& x, PassWork& e, D w, D parts) {
  copy(e, 2 * x.b * x.tl * w, x.s, x.s, x.cp * (parts + 1));
}

// The all_to_all core: Hq / cp heads over all T, one call per pass.
PassWork a2a_products(const Core& x, bool forward) {
  const D pairs = cost_parts::attended_pairs(static_cast<std::int64_t>(x.t), x.window);
  const D heads = x.b * x.hq / x.cp;
  PassWork w = forward ? work_parts::attention_forward(heads, x.t, x.hd, x.s, pairs)
                       : work_parts::attention_backward(heads, x.t, x.hd, x.s, pairs);
  return {w.gemms, 0, 0};
}

// One rank's core over the whole sequence (block_work's), whose stream and products the cost model divides by cp
// and whose kernels it keeps: taken out of `p.extra` here.
void against_one_rank(const Core& x, bool forward, CpCorePass& p) {
  const D pairs = cost_parts::attended_pairs(static_cast<std::int64_t>(x.t), x.window);
  const PassWork one = forward ? work_parts::attention_forward(x.b * x.hq, x.t, x.hd, x.s, pairs)
                               : work_parts::attention_backward(x.b * x.hq, x.t, x.hd, x.s, pairs);
  p.extra.stream_bytes -= one.stream_bytes / x.cp;
  p.extra.kernels -= one.kernels;
  p.replaced.gemms = one.gemms;
}

}  // namespace

double ring_chunk_pairs(std::int64_t chunk, int gi, int gj, std::int64_t window) {
  const D c = static_cast<D>(chunk);
  if (gj > gi) return 0;
  if (gj == gi) return cost_parts::attended_pairs(chunk, window);
  if (window <= 0) return c * c;
  // Query x and key y of the two chunks are i - j = (gi - gj)·c + (x - y) apart; c - |e| of the pairs have x - y = e,
  // and those with i - j < window are seen: e from -(c - 1) to m.
  const D m = std::min(c - 1, static_cast<D>(window) - 1 - static_cast<D>(gi - gj) * c);
  if (m < -(c - 1)) return 0;
  if (m < 0) return (c + m) * (c + m + 1) / 2;
  return c * (c - 1) / 2 + (m + 1) * c - m * (m + 1) / 2;
}

CpCoreWork cp_core_work(const BlockSpec& block, DType dtype, Recompute recompute, int tp, int cp, bool ring,
                        std::int64_t micro_batch) {
  CpCoreWork w;
  if (cp <= 1 || block.n_heads <= 0 || block.seq_len <= 0 || !is_repeated_layer(block.kind)) return w;
  CLEAVE_CHECK(tp >= 1 && micro_batch >= 1, "cp core work: tp {} and micro-batch {} must be >= 1", tp, micro_batch);
  const std::int64_t chunks = ring ? 2 * cp : cp;
  CLEAVE_CHECK(block.seq_len % chunks == 0, "cp core work: seq_len {} does not split into {} chunks", block.seq_len,
               chunks);
  Core x;
  x.cp = cp;
  x.b = static_cast<D>(micro_batch);
  x.t = static_cast<D>(block.seq_len);
  x.tl = x.t / cp;
  x.chunk = block.seq_len / (2 * cp);
  x.c = static_cast<D>(x.chunk);
  x.hq = static_cast<D>(block.n_heads / tp);
  x.hkv = static_cast<D>((block.n_kv_heads > 0 ? block.n_kv_heads : block.n_heads) / tp);
  x.hd = static_cast<D>(block.in_features / block.n_heads);
  x.q = x.hq * x.hd;
  x.k = x.hkv * x.hd;
  x.s = static_cast<D>(dtype_size(dtype));
  x.bf16 = dtype != DType::kF32;
  x.window = block.attention_window;
  if (ring) {
    const std::vector<D> calls = ring_calls(x);
    w.forward = ring_forward(x, calls, true);
    w.input_grad = ring_backward(x, calls);
    if (recompute != Recompute::kNone) w.rerun = ring_forward(x, calls, recompute == Recompute::kFull);
  } else {
    permutes(x, w.forward.extra, x.q + 2 * x.k, 3);  // qkv there
    permutes(x, w.forward.extra, x.q, 1);            // out back
    permutes(x, w.input_grad.extra, x.q, 1);         // dout there
    permutes(x, w.input_grad.extra, x.q + 2 * x.k, 3);  // dqkv back
    w.forward.products = a2a_products(x, true);
    w.input_grad.products = a2a_products(x, false);
    w.forward.extra.kernels += 1;  // the core's own call, taken out again below
    w.input_grad.extra.kernels += 2;
    const D pairs = cost_parts::attended_pairs(block.seq_len, x.window);
    w.forward.extra.stream_bytes += work_parts::attention_forward(x.b * x.hq / cp, x.t, x.hd, x.s, pairs).stream_bytes;
    w.input_grad.extra.stream_bytes +=
        work_parts::attention_backward(x.b * x.hq / cp, x.t, x.hd, x.s, pairs).stream_bytes;
    if (recompute == Recompute::kSelective) {  // the core again on the exchanged heads, no exchange
      w.rerun.products = w.forward.products;
      w.rerun.extra.kernels = 1;
      w.rerun.extra.stream_bytes =
          work_parts::attention_forward(x.b * x.hq / cp, x.t, x.hd, x.s, pairs).stream_bytes;
    }
  }
  against_one_rank(x, true, w.forward);
  against_one_rank(x, false, w.input_grad);
  if (recompute != Recompute::kNone) {
    if (recompute == Recompute::kFull && !ring) {
      w.rerun = w.forward;  // the whole forward again, exchanges included (net of one rank's already)
    } else {
      against_one_rank(x, true, w.rerun);
    }
  }
  return w;
}

}  // namespace cleave::partition
