// The attention ops through the seam on the CPU backend: the packed form equals the unpacked one (bits), bf16
// tensors give the f32 op on the bf16-rounded inputs, each output rounded once, within a bf16 ulp plus half a bf16 ulp
// of the tensor's largest value (the bf16 kernel sums its products in their own order and rounds P and dS to bf16
// before the value products; lse stays f32, within f32 rounding),
// attention_merge works in place, accumulate_grads adds, and bad arguments fail naming the op and the numbers.
// The numerics against a double reference are kernels/cpu's (tests/unit/kernels/flash_attention_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "engine/core/error.hpp"
#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::attention_ops_test {
namespace {

using cleave::kernels::test::random_floats;
using test::cast;
using test::empty;
using test::expect_error;
using test::f32;
using test::norm;
using test::rounded;

constexpr std::int64_t B = 2, T = 37, Hq = 6, Hkv = 2, hd = 6;

// Packs q [B, T, Hq hd], k, v [B, T, Hkv hd] into [B, T, (Hq + 2 Hkv) hd].
std::vector<float> pack(const Tensor& q, const Tensor& k, const Tensor& v) {
  const auto qv = q.to_floats(), kv = k.to_floats(), vv = v.to_floats();
  const std::int64_t ld = (Hq + 2 * Hkv) * hd;
  std::vector<float> out(static_cast<size_t>(B * T * ld));
  for (std::int64_t r = 0; r < B * T; ++r) {
    for (std::int64_t x = 0; x < Hq * hd; ++x) out[r * ld + x] = qv[r * Hq * hd + x];
    for (std::int64_t x = 0; x < Hkv * hd; ++x) {
      out[r * ld + Hq * hd + x] = kv[r * Hkv * hd + x];
      out[r * ld + (Hq + Hkv) * hd + x] = vv[r * Hkv * hd + x];
    }
  }
  return out;
}

AttentionParams params() {
  AttentionParams p;
  p.q_heads = Hq;
  p.kv_heads = Hkv;
  p.window = 11;
  p.q_offset = p.k_offset = 5;
  return p;
}

// f32 attention at params() on random q [B, T, Hq hd], k, v [B, T, Hkv hd] and dout (seeds seed to seed + 3): the
// inputs, the forward's out and lse, the backward's gradients.
struct F32Attention {
  Tensor q, k, v, dout, out, lse, dq, dk, dv;
};
F32Attention f32_attention(const Context& ctx, std::uint64_t seed) {
  F32Attention a;
  a.q = f32(random_floats(B * T * Hq * hd, seed), {B, T, Hq * hd});
  a.k = f32(random_floats(B * T * Hkv * hd, seed + 1), {B, T, Hkv * hd});
  a.v = f32(random_floats(B * T * Hkv * hd, seed + 2), {B, T, Hkv * hd});
  a.dout = f32(random_floats(B * T * Hq * hd, seed + 3), {B, T, Hq * hd});
  a.out = empty(a.q.shape());
  a.lse = empty({B, Hq, T});
  attention_forward(ctx, a.q, a.k, a.v, a.out, a.lse, params());
  a.dq = empty(a.q.shape());
  a.dk = empty(a.k.shape());
  a.dv = empty(a.v.shape());
  attention_backward(ctx, a.q, a.k, a.v, a.out, a.lse, a.dout, a.dq, a.dk, a.dv, params());
  return a;
}

TEST(OpsAttention, PackedEqualsUnpacked) {
  const Context ctx;
  const auto [q, k, v, dout, out, lse, dq, dk, dv] = f32_attention(ctx, 1);
  EXPECT_GT(norm(out), 0.0);
  EXPECT_GT(norm(dk), 0.0);

  const Tensor qkv = f32(pack(q, k, v), {B, T, (Hq + 2 * Hkv) * hd});
  Tensor out_p = empty(q.shape()), lse_p = empty({B, Hq, T});
  attention_forward_packed(ctx, qkv, out_p, lse_p, params());
  EXPECT_EQ(out_p.to_floats(), out.to_floats());
  EXPECT_EQ(lse_p.to_floats(), lse.to_floats());
  Tensor dqkv = empty(qkv.shape());
  attention_backward_packed(ctx, qkv, out_p, lse_p, dout, dqkv, params());
  EXPECT_EQ(dqkv.to_floats(), pack(dq, dk, dv));
}

TEST(OpsAttention, Bf16WidensAtTheEdges) {
  const Context ctx;
  const Tensor q = rounded(ctx, random_floats(B * T * Hq * hd, 5), {B, T, Hq * hd});
  const Tensor k = rounded(ctx, random_floats(B * T * Hkv * hd, 6), {B, T, Hkv * hd});
  const Tensor v = rounded(ctx, random_floats(B * T * Hkv * hd, 7), {B, T, Hkv * hd});
  const Tensor dout = rounded(ctx, random_floats(B * T * Hq * hd, 8), {B, T, Hq * hd});
  Tensor out = empty(q.shape()), lse = empty({B, Hq, T});
  attention_forward(ctx, q, k, v, out, lse, params());
  const Tensor out_r = rounded(ctx, out.to_floats(), out.shape());  // the bf16 out the backward reads
  Tensor dq = empty(q.shape()), dk = empty(k.shape()), dv = empty(v.shape());
  attention_backward(ctx, q, k, v, out_r, lse, dout, dq, dk, dv, params());

  const auto b16 = [&](const Tensor& t) { return cast(ctx, t, DType::kBF16); };
  Tensor out16 = empty(q.shape(), DType::kBF16), lse16 = empty({B, Hq, T});
  attention_forward(ctx, b16(q), b16(k), b16(v), out16, lse16, params());
  // Each bf16 output within one bf16 ulp (2^-7 relative) of the rounded f32 op's, plus half a bf16 ulp of the
  // tensor's largest |value| (P and dS rounded to bf16: half an ulp of each term, whose magnitudes can sum past the
  // element's own) and an f32-sized floor; a wrong block or a missed row is far outside.
  const auto near_bf16 = [](const Tensor& got, const Tensor& want, const char* what) {
    const auto g = got.to_floats(), w = want.to_floats();
    ASSERT_EQ(g.size(), w.size()) << what;
    float largest = 0.0f;
    for (float x : w) largest = std::max(largest, std::fabs(x));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      wrong += !(std::fabs(g[i] - w[i]) <= 1e-5 + std::fabs(w[i]) / 128 + largest / 256);
    }
    EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << g.size();
  };
  near_bf16(out16, b16(out), "out");
  const auto lse16_f = lse16.to_floats(), lse_f = lse.to_floats();  // f32 statistics
  for (std::size_t i = 0; i < lse_f.size(); ++i) {
    if (std::isinf(lse_f[i])) {
      EXPECT_EQ(lse16_f[i], lse_f[i]) << "lse " << i;
    } else {
      EXPECT_NEAR(lse16_f[i], lse_f[i], 1e-5 * (1 + std::fabs(lse_f[i]))) << "lse " << i;
    }
  }
  Tensor dq16 = empty(q.shape(), DType::kBF16), dk16 = empty(k.shape(), DType::kBF16),
         dv16 = empty(v.shape(), DType::kBF16);
  // The f32 op's rounded out and lse, so only the bf16 kernel's own arithmetic differs.
  attention_backward(ctx, b16(q), b16(k), b16(v), b16(out), lse, b16(dout), dq16, dk16, dv16, params());
  near_bf16(dq16, b16(dq), "dq");
  near_bf16(dk16, b16(dk), "dk");
  near_bf16(dv16, b16(dv), "dv");
  EXPECT_GT(norm(dq16), 0.0);
}

// verify's twin references (AttentionSums::kReordered and kReorderedQuarters, kernels/ops/precision.hpp): an all-bf16
// problem runs the f32 kernel on the widened operands with the bf16 kernel's roundings of P and dS and a half or a
// quarter of its key blocks, so its results
// differ from the bf16 kernel's only as another order of the f32 sums and another merge of partial blocks do: f32
// statistics within f32 rounding, bf16 outputs within one bf16 ulp plus an f32-sized term of the tensor's largest
// value. And they differ somewhere: were kReordered to run the bf16 kernel's arithmetic again, the twin would reorder
// no attention sum and verify's floor would miss what ring attention's merge does (as it did when the twin only
// swapped the GEMM library: f32 sums of a few exact bf16 products are often exact in any order, and the bf16 kernel's
// bits came back).
class OpsAttentionReordered : public ::testing::TestWithParam<AttentionSums> {};

TEST_P(OpsAttentionReordered, SumsDifferFromTheBf16KernelWithinF32Rounding) {
  const Context kernel;
  Context twin;
  twin.attention_sums = GetParam();
  AttentionParams p = params();
  p.window = 0;  // every row sees both of the twin's key blocks once past the first 19 keys
  const auto b16 = [&](const std::vector<float>& v, const Shape& shape) {
    return cast(kernel, rounded(kernel, v, shape), DType::kBF16);
  };
  const Tensor q = b16(random_floats(B * T * Hq * hd, 21), {B, T, Hq * hd});
  const Tensor k = b16(random_floats(B * T * Hkv * hd, 22), {B, T, Hkv * hd});
  const Tensor v = b16(random_floats(B * T * Hkv * hd, 23), {B, T, Hkv * hd});
  const Tensor dout = b16(random_floats(B * T * Hq * hd, 24), {B, T, Hq * hd});
  struct Result {
    Tensor out, lse, dq, dk, dv;
  };
  const auto run = [&](const Context& ctx) {
    Result r{empty(q.shape(), DType::kBF16), empty({B, Hq, T}), empty(q.shape(), DType::kBF16),
             empty(k.shape(), DType::kBF16), empty(v.shape(), DType::kBF16)};
    attention_forward(ctx, q, k, v, r.out, r.lse, p);
    attention_backward(ctx, q, k, v, r.out, r.lse, dout, r.dq, r.dk, r.dv, p);
    return r;
  };
  const Result a = run(kernel), b = run(twin);
  std::size_t differ = 0;
  const auto near = [&](const Tensor& got, const Tensor& want, double ulp, const char* what) {
    const auto g = got.to_floats(), x = want.to_floats();
    ASSERT_EQ(g.size(), x.size()) << what;
    float largest = 0.0f;
    for (float e : x) largest = std::max(largest, std::fabs(e));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      differ += g[i] != x[i];
      wrong += !(std::fabs(g[i] - x[i]) <= ulp * std::max(std::fabs(g[i]), std::fabs(x[i])) + largest * 0x1p-16);
    }
    EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << g.size();
  };
  near(b.lse, a.lse, 0x1p-20, "lse");
  near(b.out, a.out, 0x1p-7, "out");
  near(b.dq, a.dq, 0x1p-7, "dq");
  near(b.dk, a.dk, 0x1p-7, "dk");
  near(b.dv, a.dv, 0x1p-7, "dv");
  EXPECT_GT(differ, 0u) << "the twin's attention has the bf16 kernel's bits: it reorders none of its sums";
  EXPECT_GT(norm(b.dk), 0.0);
}

// The two twins' orders (halved and quartered key blocks) differ from each other too, or the second twin would be the
// first again and verify's pair of twins one draw, not two.
INSTANTIATE_TEST_SUITE_P(Twins, OpsAttentionReordered,
                         ::testing::Values(AttentionSums::kReordered, AttentionSums::kReorderedQuarters));

TEST(OpsAttention, HalvedAndQuarteredKeyBlocksSumInDifferentOrders) {
  const Context kernel;
  Context halves, quarters;
  halves.attention_sums = AttentionSums::kReordered;
  quarters.attention_sums = AttentionSums::kReorderedQuarters;
  AttentionParams p = params();
  p.window = 0;
  const auto b16 = [&](const std::vector<float>& v, const Shape& shape) {
    return cast(kernel, rounded(kernel, v, shape), DType::kBF16);
  };
  const Tensor q = b16(random_floats(B * T * Hq * hd, 31), {B, T, Hq * hd});
  const Tensor k = b16(random_floats(B * T * Hkv * hd, 32), {B, T, Hkv * hd});
  const Tensor v = b16(random_floats(B * T * Hkv * hd, 33), {B, T, Hkv * hd});
  const auto forward = [&](const Context& ctx) {
    Tensor out = empty(q.shape(), DType::kBF16), lse = empty({B, Hq, T});
    attention_forward(ctx, q, k, v, out, lse, p);
    return lse.to_floats();
  };
  const std::vector<float> a = forward(halves), b = forward(quarters);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  EXPECT_GT(differ, 0u) << "quartered key blocks merge the rows' partial sums as halved ones do";
}

TEST(OpsAttention, AccumulateAddsOntoTheGradients) {
  const Context ctx;
  const auto [q, k, v, dout, out, lse, dq, dk, dv] = f32_attention(ctx, 9);
  Tensor dq2 = f32(dq.to_floats(), dq.shape()), dk2 = f32(dk.to_floats(), dk.shape()),
         dv2 = f32(dv.to_floats(), dv.shape());
  AttentionParams acc = params();
  acc.accumulate_grads = true;
  attention_backward(ctx, q, k, v, out, lse, dout, dq2, dk2, dv2, acc);
  auto twice = [](const Tensor& t) {
    auto x = t.to_floats();
    for (auto& e : x) e += e;
    return x;
  };
  EXPECT_EQ(dq2.to_floats(), twice(dq));
  EXPECT_EQ(dk2.to_floats(), twice(dk));
  EXPECT_EQ(dv2.to_floats(), twice(dv));
}

TEST(OpsAttention, MergeInPlace) {
  const Context ctx;
  const float inf = std::numeric_limits<float>::infinity();
  Tensor out_a = f32({1, 2, 3, 4}, {1, 2, 2}), lse_a = f32({0.0f, -inf}, {1, 1, 2});
  const Tensor out_b = f32({5, 6, 7, 8}, {1, 2, 2}), lse_b = f32({0.0f, 1.0f}, {1, 1, 2});
  attention_merge(ctx, out_a, lse_a, out_b, lse_b, out_a, lse_a);
  // row 0: equal weights; row 1: only b.
  EXPECT_EQ(out_a.to_floats(), (std::vector<float>{3, 4, 7, 8}));
  EXPECT_FLOAT_EQ(lse_a.to_floats()[0], std::log(2.0f));
  EXPECT_FLOAT_EQ(lse_a.to_floats()[1], 1.0f);
}

TEST(OpsAttention, BadArgumentsNameTheOpAndTheNumbers) {
  const Context ctx;
  const Tensor q = f32(random_floats(B * T * Hq * hd, 13), {B, T, Hq * hd});
  const Tensor k = f32(random_floats(B * T * Hkv * hd, 14), {B, T, Hkv * hd});
  Tensor out = empty(q.shape()), lse = empty({B, Hq, T});
  AttentionParams p = params();
  p.kv_heads = 4;
  expect_error([&] { attention_forward(ctx, q, k, k, out, lse, p); },
               "attention_forward: 6 query heads do not split into groups over 4 key/value heads");
  p = params();
  p.causal = false;
  expect_error([&] { attention_forward(ctx, q, k, k, out, lse, p); }, "sliding window (11) needs causal attention");
  expect_error([&] { attention_forward(ctx, q, k, k, out, empty({B, Hq, T}, DType::kBF16), params()); },
               "attention_forward: lse");
  expect_error([&] { attention_forward(ctx, q, k, k, out, empty({B, Hq, T + 1}), params()); }, "lse");
  expect_error([&] { attention_forward_packed(ctx, q, out, lse, params()); }, "attention_forward_packed: qkv");
}

}  // namespace
}  // namespace cleave::ops::attention_ops_test
