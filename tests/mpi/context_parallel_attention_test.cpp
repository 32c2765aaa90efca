// Context-parallel attention under mpiexec (the cp group is the whole world, cp = 2 or 4): the attention core
// (layers/attention_core.hpp) with every exchange, forward and backward, against the same core on one rank
// over the whole sequence, on random inputs of an awkward size (batch 2, 24 tokens, head dim 6).
//
// Each rank feeds its tokens of the whole-sequence qkv (CpLayout: chunk r under all_to_all, chunks r and
// 2cp-1-r under ring) and a random dout; its out and dqkv must equal the reference's rows of those tokens.
// Bounds: all_to_all runs the very op of one rank on the same whole sequence per head (the exchange moves
// values without arithmetic), so it must be bit-identical; ring merges per-block partial results by their
// log-sum-exp, a different order of the same sums: max |got - want| <= 2e-6 · max |want| per tensor (fp32)
// through the core, f32 rounding only, about 16 ulps of the largest value (measured 1.4e-6 at cp 4, heads 6/2,
// since the 16-lane sums of kernels/cpu/flash_attention_rows.hpp; 1.0e-6, the bound then, before them), and
// 1e-6 for the ring called directly (RingMatchesOneRankWithGroupedQueryHeads); every reference is checked
// non-zero so an all-zero result cannot pass. Heads: 4 (divisible by cp, as
// all_to_all needs) and, for ring, 3 (odd); grouped-query through the core: 8 query over 4 kv heads
// (all_to_all), 6 over 2 (ring). Grouped-query attention: ring attention on q | k | v with 6 query
// heads over 2 kv heads (unexpanded) against the same block attention over the whole sequence at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/core/rng.hpp"
#include "kernels/ops/ops.hpp"
#include "layers/attention_core.hpp"
#include "layers/context_parallel/cp_layout.hpp"
#include "layers/context_parallel/ring_attention.hpp"
#include "tests/mpi/mpi_test_env.hpp"

namespace cleave::layers::context_parallel_attention_test {
namespace {

constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kSeq = 24;
constexpr std::int64_t kHeadDim = 6;

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  rng::fill_normal(t.data<float>(), t.numel(), seed, rng::hash_key("cp-attention-test"), 0.0f, 1.0f);
  return t;
}

// This rank's tokens of x [B, T, C] as [B, T / cp, C].
Tensor local_tokens(const Tensor& x, const CpLayout& cp) {
  const std::int64_t b = x.dim(0), t = x.dim(1), c = x.dim(2), tl = t / cp.size;
  Tensor out = Tensor::empty(Shape{b, tl, c}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t s = 0; s < b; ++s) {
    for (const CpSegment& run : cp.segments(tl)) {
      std::copy_n(x.data<float>() + (s * t + run.global_begin) * c, run.length * c,
                  out.data<float>() + (s * tl + run.local_begin) * c);
    }
  }
  return out;
}

// max |got - want| / max |want|; the reference must not be all zeros.
double scaled_error(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  double err = 0, scale = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want.data<float>()[i])));
  }
  EXPECT_GT(scale, 0.0) << what << ": the reference is all zeros, the comparison would prove nothing";
  return scale > 0 ? err / scale : INFINITY;
}

void check_exchange(CpExchange exchange, std::int64_t heads, bool recompute, std::int64_t kv_heads = 0,
                    std::int64_t window = 0) {
  if (kv_heads == 0) kv_heads = heads;
  auto world = testing::make_world();
  const int cp = world->size();
  const std::string name = std::string(exchange == CpExchange::kRing ? "ring" : "all_to_all") + " cp" +
                           std::to_string(cp) + " heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) +
                           " window " + std::to_string(window) +
                           (recompute ? " recompute" : "");
  SCOPED_TRACE(name);
  const std::int64_t width = heads * kHeadDim;
  const Tensor qkv = random_tensor(Shape{kBatch, kSeq, width + 2 * kv_heads * kHeadDim}, 11);
  const Tensor dout = random_tensor(Shape{kBatch, kSeq, width}, 12);

  Context one;  // one rank, the whole sequence
  Stash one_stash;
  const Tensor want_out =
      attention_core_forward(one, qkv, heads, kv_heads, kHeadDim, window, recompute, one_stash, "reference");
  const Tensor want_dqkv = attention_core_backward(one, [&] { return dout; }, heads, kv_heads, kHeadDim, window,
                                                   recompute, one_stash, "reference");

  Context ctx;
  ctx.cp_comm = world.get();
  ctx.cp = {cp, world->rank(), exchange};
  Stash stash;
  const Tensor out =
      attention_core_forward(ctx, local_tokens(qkv, ctx.cp), heads, kv_heads, kHeadDim, window, recompute, stash, name);
  const Tensor dqkv = attention_core_backward(ctx, [&] { return local_tokens(dout, ctx.cp); }, heads, kv_heads,
                                              kHeadDim, window, recompute, stash, name);
  EXPECT_TRUE(stash.tensors.empty()) << "backward must release the stash";

  // The ring sums each row's keys in chunks, merged by their log-sum-exp: f32 rounding only, about 16 ulps of the
  // largest value at most (measured: 1.4e-6 at cp 4, heads 6/2, with the 16-lane sums of kernels/cpu/
  // flash_attention_rows.hpp; 1.0e-6 before them).
  const double bound = exchange == CpExchange::kAllToAll ? 0.0 : 2e-6;
  EXPECT_LE(scaled_error(out, local_tokens(want_out, ctx.cp), "out"), bound);
  EXPECT_LE(scaled_error(dqkv, local_tokens(want_dqkv, ctx.cp), "dqkv"), bound);
}

TEST(ContextParallelAttention, AllToAllMatchesOneRank) {
  check_exchange(CpExchange::kAllToAll, 4, false);
  check_exchange(CpExchange::kAllToAll, 4, true);
  if (testing::make_world()->size() == 2) check_exchange(CpExchange::kAllToAll, 6, false);
  check_exchange(CpExchange::kAllToAll, 8, false, 4);  // grouped-query: each rank takes 8/cp query heads and
  check_exchange(CpExchange::kAllToAll, 8, true, 4);   // their 4/cp kv heads, unexpanded
}

TEST(ContextParallelAttention, RingMatchesOneRank) {
  check_exchange(CpExchange::kRing, 4, false);
  check_exchange(CpExchange::kRing, 3, false);  // odd heads: ring has no head rule
  check_exchange(CpExchange::kRing, 3, true);
  check_exchange(CpExchange::kRing, 6, false, 2);  // grouped-query through the core (Llama's packing)
  check_exchange(CpExchange::kRing, 6, true, 2);
}

// Sliding window (Mistral) against one rank's windowed attention over the whole sequence: 24 tokens in 2·cp
// chunks of 6 (cp2) or 3 (cp4); window 1 (each query sees itself only), 5 (within a chunk and its neighbour at
// cp2, up to two chunks back at cp4: pairs of chunks beyond it are skipped), 13 (several chunks). The ring must
// skip only chunk pairs with no visible query/key pair: a wrongly skipped pair loses keys (a large error; window
// 5 at cp4 puts the edge inside a skipped-or-not pair), while a pair kept needlessly is masked whole by the op;
// the bound is the one without a window.
TEST(ContextParallelAttention, RingMatchesOneRankWithSlidingWindow) {
  for (const std::int64_t window : {1, 5, 13}) {
    check_exchange(CpExchange::kRing, 4, false, 4, window);
    check_exchange(CpExchange::kRing, 6, false, 2, window);
  }
  check_exchange(CpExchange::kRing, 6, true, 2, 5);  // selective recomputation reruns the windowed ring
  check_exchange(CpExchange::kAllToAll, 4, false, 4, 5);
}

TEST(ContextParallelAttention, RingMatchesOneRankWithGroupedQueryHeads) {
  auto world = testing::make_world();
  const std::int64_t hq = 6, hkv = 2, q_cols = hq * kHeadDim, kv_cols = hkv * kHeadDim;
  const Tensor qkv = random_tensor(Shape{kBatch, kSeq, q_cols + 2 * kv_cols}, 21);
  const Tensor dout = random_tensor(Shape{kBatch, kSeq, q_cols}, 22);
  // The reference: the whole sequence as one causal block, from separate q, k, v.
  const auto part = [&](std::int64_t col, std::int64_t cols) {
    Tensor out = Tensor::empty(Shape{kBatch, kSeq, cols}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
    for (std::int64_t i = 0; i < kBatch * kSeq; ++i) {
      std::copy_n(qkv.data<float>() + i * qkv.dim(2) + col, cols, out.data<float>() + i * cols);
    }
    return out;
  };
  const Tensor q = part(0, q_cols), k = part(q_cols, kv_cols), v = part(q_cols + kv_cols, kv_cols);
  Context one;
  ops::AttentionParams whole;
  whole.q_heads = hq;
  whole.kv_heads = hkv;
  Tensor want_out = Tensor::empty(q.shape(), DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor lse = Tensor::empty(Shape{kBatch, hq, kSeq}, DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  ops::attention_forward(one, q, k, v, want_out, lse, whole);
  Tensor dq = Tensor::empty(q.shape(), DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor dk = Tensor::empty(k.shape(), DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  Tensor dv = Tensor::empty(v.shape(), DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  ops::attention_backward(one, q, k, v, want_out, lse, dout, dq, dk, dv, whole);
  Tensor want_dqkv = Tensor::empty(qkv.shape(), DType::kF32, MemoryCategory::kActivations, cpu_allocator());
  for (std::int64_t i = 0; i < kBatch * kSeq; ++i) {
    float* row = want_dqkv.data<float>() + i * qkv.dim(2);
    std::copy_n(dq.data<float>() + i * q_cols, q_cols, row);
    std::copy_n(dk.data<float>() + i * kv_cols, kv_cols, row + q_cols);
    std::copy_n(dv.data<float>() + i * kv_cols, kv_cols, row + q_cols + kv_cols);
  }

  Context ctx;
  ctx.cp_comm = world.get();
  ctx.cp = {world->size(), world->rank(), CpExchange::kRing};
  Stash stash;
  const Tensor out = ring_attention_forward(ctx, local_tokens(qkv, ctx.cp), {hq, hkv, kHeadDim}, false, stash, "gqa");
  const Tensor dqkv = ring_attention_backward(ctx, local_tokens(dout, ctx.cp), {hq, hkv, kHeadDim}, false, stash, "gqa");
  EXPECT_LE(scaled_error(out, local_tokens(want_out, ctx.cp), "out"), 1e-6);
  EXPECT_LE(scaled_error(dqkv, local_tokens(want_dqkv, ctx.cp), "dqkv"), 1e-6);
}

// bf16 (device.precision bf16): q, k, v, out and dout bf16 on every rank; the reference is one rank's bf16 core over
// the whole sequence, which rounds P and dS to bf16 before its value products, accumulates in f32 and rounds its out
// and dqkv once. Ring keeps that contract (its widened blocks round P and dS as one rank does, AttentionParams::
// bf16_roundings, P shifted by a multiple of ln 2 so its rounding does not depend on where the block's running
// maximum stands; f32 block outputs merged in f32, dq and the travelling dK/dV summed in f32, each rounded once at
// the end), so every element is the reference's up to one rounding of an f32 value that differs by reassociation
// only (and a rare P or dS rounding that an f32 reordering tips: none here): |got - want| <= ulp(want) + 1e-6 ·
// max |want| element-wise. Without the blocks' roundings 7-18% of out's and dqkv's elements failed this bound (cp2,
// 2026-11-30), with them but P shifted by the block's own running maximum 3-7%. Earlier, the block outputs were
// rounded to bf16 before each merge and dq, dK, dV summed in bf16 across the ring's steps: 6-9% of out's and 5-11%
// of dqkv's elements failed this bound (cp2, both cases).
Tensor as_dtype(const Tensor& x, DType dtype) {
  Context host;
  Tensor out = Tensor::empty(x.shape(), dtype, MemoryCategory::kActivations, cpu_allocator());
  ops::copy(host, x, out);
  return out;
}

// Elements of got (bf16) farther from want (bf16) than one bf16 ulp of want plus 1e-6 of the largest |want|.
std::int64_t beyond_one_rounding(const Tensor& got_bf16, const Tensor& want_bf16, const std::string& what) {
  const Tensor got = as_dtype(got_bf16, DType::kF32), want = as_dtype(want_bf16, DType::kF32);
  EXPECT_EQ(got.shape(), want.shape()) << what;
  double scale = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(double{want.data<float>()[i]}));
  EXPECT_GT(scale, 0.0) << what << ": the reference is all zeros, the comparison would prove nothing";
  std::int64_t beyond = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.data<float>()[i];
    const double ulp = w == 0 ? 0 : std::ldexp(1.0, std::ilogb(w) - 7);  // bf16: an 8-bit significand
    if (std::abs(got.data<float>()[i] - w) > ulp + 1e-6 * scale) ++beyond;
  }
  std::printf("[ bf16 ] %s: %lld of %lld elements beyond one rounding\n", what.c_str(), static_cast<long long>(beyond),
              static_cast<long long>(want.numel()));
  return beyond;
}

void check_ring_bf16(std::int64_t heads, std::int64_t kv_heads, bool recompute) {
  auto world = testing::make_world();
  SCOPED_TRACE("ring bf16 cp" + std::to_string(world->size()) + " heads " + std::to_string(heads) + "/" +
               std::to_string(kv_heads) + (recompute ? " recompute" : ""));
  const std::int64_t width = heads * kHeadDim;
  const Tensor qkv = random_tensor(Shape{kBatch, kSeq, width + 2 * kv_heads * kHeadDim}, 31);
  const Tensor dout = random_tensor(Shape{kBatch, kSeq, width}, 32);
  Context one;
  one.precision = ops::Precision::kBf16;
  Stash one_stash;
  const Tensor want_out = attention_core_forward(one, as_dtype(qkv, DType::kBF16), heads, kv_heads, kHeadDim, 0,
                                                 recompute, one_stash, "reference");
  const Tensor want_dqkv = attention_core_backward(
      one, [&] { return as_dtype(dout, DType::kBF16); }, heads, kv_heads, kHeadDim, 0, recompute, one_stash,
      "reference");
  Context ctx;
  ctx.precision = ops::Precision::kBf16;
  ctx.cp_comm = world.get();
  ctx.cp = {world->size(), world->rank(), CpExchange::kRing};
  Stash stash;
  const Tensor out = attention_core_forward(ctx, as_dtype(local_tokens(qkv, ctx.cp), DType::kBF16), heads, kv_heads,
                                            kHeadDim, 0, recompute, stash, "ring bf16");
  const Tensor dqkv = attention_core_backward(
      ctx, [&] { return as_dtype(local_tokens(dout, ctx.cp), DType::kBF16); }, heads, kv_heads, kHeadDim, 0,
      recompute, stash, "ring bf16");
  ASSERT_EQ(out.dtype(), DType::kBF16);
  ASSERT_EQ(dqkv.dtype(), DType::kBF16);
  EXPECT_EQ(beyond_one_rounding(out, local_tokens(as_dtype(want_out, DType::kF32), ctx.cp), "out"), 0);
  EXPECT_EQ(beyond_one_rounding(dqkv, local_tokens(as_dtype(want_dqkv, DType::kF32), ctx.cp), "dqkv"), 0);
}

TEST(ContextParallelAttention, RingInBf16AccumulatesInF32LikeOneRank) {
  check_ring_bf16(4, 4, false);
  check_ring_bf16(6, 2, true);  // grouped-query heads; selective recomputation reruns the forward ring
}

// all_to_all with heads cp does not divide: a clear error, on every rank alike, before any exchange.
TEST(ContextParallelAttention, AllToAllRefusesIndivisibleHeads) {
  auto world = testing::make_world();
  Context ctx;
  ctx.cp_comm = world.get();
  ctx.cp = {world->size(), world->rank(), CpExchange::kAllToAll};
  const std::int64_t heads = world->size() + 1;
  const Tensor qkv = random_tensor(Shape{kBatch, kSeq / world->size(), 3 * heads * kHeadDim}, 3);
  Stash stash;
  try {
    attention_core_forward(ctx, qkv, heads, heads, kHeadDim, 0, false, stash, "attention");
    ADD_FAILURE() << "accepted " << heads << " heads over cp " << world->size();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.context_parallel_size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::layers::context_parallel_attention_test
