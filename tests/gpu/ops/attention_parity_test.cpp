// Seam parity of memory-efficient attention: ops::attention_forward / attention_backward (unpacked, with GQA,
// position offsets and a sliding window), the packed forms and attention_merge on cuda:0 against the CPU backend,
// f32 and bf16, on awkward shapes: T = 1, 17, 130 (not multiples of the 32-key tiles or 8-row blocks), head dims 6
// and 64, 6 query heads over 2 kv heads, keys starting in the future of the first queries (rows with lse -inf);
// head dims 80, 96 and 128 (a lane's third and fourth dims, d + 64 and d + 96, of which hd <= 64 uses none; 128 is
// the kernels' limit), ring attention's blocks at chunk offsets (the diagonal, an earlier chunk whole) and
// non-causal attention (every key visible: the tiles and the dk/dv rows' whole ranges); one query over 130 keys
// and 70 queries over one key; a ring block whose window leaves later rows no key; 8 query heads on one kv head;
// the packed form in bf16 accumulating; the merge with rows empty on one side or both, in place.
// Over a single key dq and dk are 0 but for rounding, so they are held near 0 instead (expect_near_zero). Skips
// without a device (parity_util.hpp).
//
// Tolerances (relative to each element plus the tensor's scale, parity_util.hpp):
//  - f32 1e-4: the same sums in another order (per-tile online softmax on the GPU, 64 x 128 BLAS blocks on the
//    CPU) and expf vs the CPU's polynomial exp, a few f32 ulps each, grown by the backward chain.
//  - bf16 2e-2: the inputs are the same bf16 values and both sides accumulate in f32; the CPU kernel rounds P and
//    dS to bf16 before its value products (half a bf16 ulp of each term, measured at a few 1e-3 of the tensor's
//    scale, docs/ops.md "Attention"), so they differ by that, the f32 error above and one final bf16 rounding
//    (2^-9 relative) that can fall on either side of a tie.
#include <cmath>
#include <limits>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::attention_parity_test {
namespace {

struct AttentionCase {
  std::int64_t batch, q_len, kv_len, q_heads, kv_heads, head_dim;
  std::int64_t q_offset, k_offset, window;
  DType dtype;
  bool causal = true;
};

std::string name(const AttentionCase& c) {
  return "attention B=" + std::to_string(c.batch) + " Tq=" + std::to_string(c.q_len) + " Tk=" +
         std::to_string(c.kv_len) + " H=" + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) +
         " hd=" + std::to_string(c.head_dim) + " offsets " + std::to_string(c.q_offset) + "/" +
         std::to_string(c.k_offset) + " window " + std::to_string(c.window) + " " + std::string(dtype_name(c.dtype)) +
         (c.causal ? "" : " non-causal");
}

double tolerance(DType dtype) { return dtype == DType::kBF16 ? 2e-2 : 1e-4; }

const AttentionCase kCases[] = {
    {2, 1, 1, 6, 2, 6, 0, 0, 0, DType::kF32},        {2, 17, 17, 6, 2, 6, 0, 0, 0, DType::kF32},
    {1, 130, 130, 6, 2, 64, 0, 0, 0, DType::kF32},   {1, 130, 130, 3, 3, 6, 0, 0, 37, DType::kF32},
    {2, 17, 130, 6, 2, 64, 130, 0, 50, DType::kF32}, {1, 17, 30, 2, 1, 6, 0, 10, 0, DType::kF32},
    {2, 17, 17, 6, 2, 6, 0, 0, 0, DType::kBF16},     {1, 130, 130, 6, 2, 64, 0, 0, 0, DType::kBF16},
    {1, 45, 45, 2, 1, 128, 0, 0, 0, DType::kF32},    {1, 45, 45, 2, 1, 128, 0, 0, 0, DType::kBF16},
    {2, 33, 33, 4, 2, 80, 0, 0, 0, DType::kF32},     {2, 17, 40, 6, 2, 6, 0, 0, 0, DType::kF32, false},
    {1, 45, 45, 2, 1, 128, 0, 0, 0, DType::kF32, false},
    // One query after 130 keys (4 query heads on 1 kv head): every key in one row, 5 tiles, dk/dv from one row.
    {1, 1, 130, 4, 1, 64, 129, 0, 0, DType::kF32},
    // One key, non-causal: 70 query rows over a tile holding a single key.
    {2, 70, 1, 2, 2, 6, 0, 0, 0, DType::kF32, false},
    // A ring block with a window: queries 66..131 over keys 0..65, window 40 (the first rows see keys 27..65, rows
    // from 105 on see none: lse -inf, dk/dv of keys 0..26 zero), bf16 at the head limit.
    {1, 66, 66, 4, 2, 128, 66, 0, 40, DType::kBF16},
    // 8 query heads on 1 kv head (the dk/dv blocks sum 8 heads' rows), head_dim 32 (one dim per lane).
    {3, 33, 33, 8, 1, 32, 0, 0, 0, DType::kBF16},
    // Ring attention's blocks at chunk offsets with head_dim 96 (a lane's third dim, d + 64, and no fourth): the
    // diagonal block of chunk 2 (causal from position 80), and chunk 3's queries over the whole of chunk 1.
    {2, 40, 40, 4, 2, 96, 80, 80, 0, DType::kF32},   {1, 40, 40, 4, 2, 96, 80, 80, 0, DType::kBF16},
    {2, 40, 40, 4, 2, 96, 120, 40, 0, DType::kF32},
};

ops::AttentionParams params_of(const AttentionCase& c) {
  ops::AttentionParams p;
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.q_offset = c.q_offset;
  p.k_offset = c.k_offset;
  p.window = c.window;
  p.causal = c.causal;
  return p;
}

class AttentionParity : public OpsParity {
 protected:
  Tensor q_for(const AttentionCase& c, float lo = -2.0f, float hi = 2.0f) {
    return random(Shape{c.batch, c.q_len, c.q_heads * c.head_dim}, c.dtype, lo, hi);
  }
  Tensor kv_for(const AttentionCase& c) {
    return random(Shape{c.batch, c.kv_len, c.kv_heads * c.head_dim}, c.dtype, -2.0f, 2.0f);
  }
  // With one key (kv_len 1) every row's softmax is exactly 1 on it, so dS = P (dP - D) is 0 but for rounding (dP
  // and D are one dot product summed in two orders) and dq, dk are rounding noise on both sides (or all zero on the
  // CPU, which expect_close refuses as a reference): no relative comparison holds them. They must be near 0: at
  // most 1e-4 in absolute value (inputs in [-2, 2], dout in [-1, 1], head_dim <= 128: the noise is ~1e-6).
  void expect_near_zero(const Tensor& gpu_out, const std::string& what) {
    std::int64_t wrong = 0;
    for (float v : to_cpu(gpu_out).to_floats()) wrong += !(std::fabs(v) <= 1e-4f);
    EXPECT_EQ(wrong, 0) << what << ": " << wrong << " elements of a gradient that is 0 (one key) are not near 0";
  }
  // The packed forms at c's sizes (q_len the sequence; causal, no offsets or window): the forward, then the backward
  // accumulating onto a random dqkv, the same start on both sides. out and dqkv within `tol`, lse within `lse_tol`.
  void expect_packed_parity(const AttentionCase& c, double tol, double lse_tol, const std::string& what) {
    const std::int64_t b = c.batch, t = c.q_len, hq = c.q_heads, hkv = c.kv_heads, hd = c.head_dim;
    ops::AttentionParams p;
    p.q_heads = hq;
    p.kv_heads = hkv;
    const Tensor qkv = random(Shape{b, t, (hq + 2 * hkv) * hd}, c.dtype, -2.0f, 2.0f);
    const Tensor dout = random(Shape{b, t, hq * hd}, c.dtype);
    Tensor out = empty_cpu(dout.shape(), c.dtype), lse = empty_cpu(Shape{b, hq, t}, DType::kF32);
    ops::attention_forward_packed(cpu(), qkv, out, lse, p);
    Tensor gout = poisoned_gpu(out.shape(), c.dtype), glse = poisoned_gpu(lse.shape(), DType::kF32);
    ops::attention_forward_packed(gpu(), to_gpu(qkv), gout, glse, p);
    expect_close(out, gout, tol, what + " out");
    expect_close(lse, glse, lse_tol, what + " lse");
    const Tensor start = random(qkv.shape(), c.dtype);
    Tensor dqkv = empty_cpu(qkv.shape(), c.dtype);
    ops::copy(cpu(), start, dqkv);
    Tensor gdqkv = to_gpu(start);
    p.accumulate_grads = true;
    ops::attention_backward_packed(cpu(), qkv, out, lse, dout, dqkv, p);
    ops::attention_backward_packed(gpu(), to_gpu(qkv), to_gpu(out), to_gpu(lse), to_gpu(dout), gdqkv, p);
    expect_close(dqkv, gdqkv, tol, what + " dqkv (accumulated)");
  }
};

TEST_F(AttentionParity, ForwardAndBackwardMatchCpu) {
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(name(c));
    const ops::AttentionParams p = params_of(c);
    const Tensor q = q_for(c), k = kv_for(c), v = kv_for(c), dout = q_for(c, -1.0f, 1.0f);
    const Shape lse_shape{c.batch, c.q_heads, c.q_len};
    Tensor out = empty_cpu(q.shape(), c.dtype), lse = empty_cpu(lse_shape, DType::kF32);
    ops::attention_forward(cpu(), q, k, v, out, lse, p);
    Tensor gpu_out = poisoned_gpu(q.shape(), c.dtype), gpu_lse = poisoned_gpu(lse_shape, DType::kF32);
    ops::attention_forward(gpu(), to_gpu(q), to_gpu(k), to_gpu(v), gpu_out, gpu_lse, p);
    expect_close(out, gpu_out, tolerance(c.dtype), name(c) + " out");
    expect_close(lse, gpu_lse, tolerance(DType::kF32), name(c) + " lse");  // -inf rows must match exactly

    // Both backends read the CPU's out and lse, so the gradients are compared on the same stash.
    Tensor dq = empty_cpu(q.shape(), c.dtype), dk = empty_cpu(k.shape(), c.dtype), dv = empty_cpu(v.shape(), c.dtype);
    ops::attention_backward(cpu(), q, k, v, out, lse, dout, dq, dk, dv, p);
    Tensor gdq = poisoned_gpu(q.shape(), c.dtype), gdk = poisoned_gpu(k.shape(), c.dtype),
           gdv = poisoned_gpu(v.shape(), c.dtype);
    ops::attention_backward(gpu(), to_gpu(q), to_gpu(k), to_gpu(v), to_gpu(out), to_gpu(lse), to_gpu(dout), gdq, gdk,
                            gdv, p);
    if (c.kv_len == 1) {
      expect_near_zero(gdq, name(c) + " dq");
      expect_near_zero(gdk, name(c) + " dk");
    } else {
      expect_close(dq, gdq, tolerance(c.dtype), name(c) + " dq");
      expect_close(dk, gdk, tolerance(c.dtype), name(c) + " dk");
    }
    expect_close(dv, gdv, tolerance(c.dtype), name(c) + " dv");
  }
}

TEST_F(AttentionParity, PackedFormsAndAccumulateMatchCpu) {
  expect_packed_parity({2, 45, 45, 6, 2, 8, 0, 0, 0, DType::kF32}, 1e-4, 1e-4, "packed");
}

TEST_F(AttentionParity, MergeMatchesCpu) {
  const Shape out_shape{2, 17, 3 * 8}, lse_shape{2, 3, 17};
  const Tensor a = random(out_shape, DType::kF32), b = random(out_shape, DType::kF32);
  const Tensor la = random(lse_shape, DType::kF32, -3.0f, 3.0f), lb = random(lse_shape, DType::kF32, -3.0f, 3.0f);
  Tensor out = empty_cpu(out_shape, DType::kF32), lse = empty_cpu(lse_shape, DType::kF32);
  ops::attention_merge(cpu(), a, la, b, lb, out, lse);
  Tensor ga = to_gpu(a), gla = to_gpu(la);
  ops::attention_merge(gpu(), ga, gla, to_gpu(b), to_gpu(lb), ga, gla);  // in place
  expect_close(out, ga, 1e-5, "merged out");
  expect_close(lse, gla, 1e-5, "merged lse");
}

// The packed form in bf16 (the mixed-precision step's layout: q | k | v columns of one tensor, dqkv likewise),
// accumulating onto a random dqkv, GQA and T = 37 (not a multiple of the 8-row blocks or 32-key tiles).
TEST_F(AttentionParity, PackedBf16AccumulateMatchesCpu) {
  expect_packed_parity({2, 37, 37, 4, 2, 64, 0, 0, 0, DType::kBF16}, tolerance(DType::kBF16), tolerance(DType::kF32),
                       "packed bf16");
}

// The merge's edges, f32 and bf16: rows empty on one side (lse -inf: the other side's out and lse pass through) and
// on both (out 0, lse -inf, as the CPU writes them), written in place (out = out_a, lse = lse_a: the ring's use) at
// head_dim 6 and 64. bf16: the same f32 weights, one final rounding that may
// fall either side of a tie (8e-3); f32: expf against the CPU's exp in the weights (1e-5).
TEST_F(AttentionParity, MergeWithEmptyRowsMatchesCpu) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (std::int64_t hd : {6, 64}) {
      const std::string what = std::string(dtype_name(dtype)) + " hd " + std::to_string(hd);
      const Shape out_shape{2, 19, 3 * hd}, lse_shape{2, 3, 19};
      const Tensor a = random(out_shape, dtype), b = random(out_shape, dtype);
      Tensor la = random(lse_shape, DType::kF32, -3.0f, 3.0f), lb = random(lse_shape, DType::kF32, -3.0f, 3.0f);
      for (std::int64_t i = 0; i < la.numel(); ++i) {
        if (i % 3 == 0) la.data<float>()[i] = neg_inf;
        if (i % 5 == 0) lb.data<float>()[i] = neg_inf;
      }
      Tensor out = empty_cpu(out_shape, dtype), lse = empty_cpu(lse_shape, DType::kF32);
      ops::attention_merge(cpu(), a, la, b, lb, out, lse);
      Tensor ga = to_gpu(a), gla = to_gpu(la);
      ops::attention_merge(gpu(), ga, gla, to_gpu(b), to_gpu(lb), ga, gla);  // in place
      expect_close(out, ga, dtype == DType::kBF16 ? 8e-3 : 1e-5, "merged out " + what);
      expect_close(lse, gla, 1e-5, "merged lse " + what);
    }
  }
}

TEST_F(AttentionParity, MixedDtypesAreRefusedByName) {
  const Tensor q = to_gpu(random(Shape{1, 3, 6}, DType::kF32));
  Tensor out = poisoned_gpu(Shape{1, 3, 6}, DType::kBF16), lse = poisoned_gpu(Shape{1, 1, 3}, DType::kF32);
  ops::AttentionParams p;
  p.q_heads = p.kv_heads = 1;
  try {
    ops::attention_forward(gpu(), q, q, q, out, lse, p);
    FAIL() << "attention_forward accepted f32 q with a bf16 out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::testing::attention_parity_test
