// The Llama ops through the seam on the CPU backend, bf16 path: each op on bf16 tensors equals the f32 op on
// the bf16-rounded inputs, with each bf16 output rounded once (f32 statistics and accumulated weight
// gradients stay f32 and are bit-equal). Awkward shapes: odd rows, hd 6, Hq 6 over Hkv 2, an offset.
#include <gtest/gtest.h>

#include "kernels/ops/ops.hpp"
#include "unit/kernels/kernel_test_util.hpp"
#include "unit/ops/ops_test_util.hpp"

namespace cleave::ops::llama_ops_test {
namespace {

using cleave::kernels::test::random_floats;
using test::cast;
using test::empty;
using test::expect_rounded_once;
using test::f32;
using test::rounded;

TEST(OpsLlamaBf16, RmsNormWidensAtTheEdges) {
  const Context ctx;
  const std::int64_t rows = 7, cols = 6;
  const auto xv = random_floats(rows * cols, 1, 2.0f), wv = random_floats(cols, 2), dyv = random_floats(rows * cols, 3);
  const Tensor x = rounded(ctx, xv, {rows, cols}), w = rounded(ctx, wv, {cols}), dy = rounded(ctx, dyv, {rows, cols});
  const Tensor x16 = cast(ctx, x, DType::kBF16), w16 = cast(ctx, w, DType::kBF16), dy16 = cast(ctx, dy, DType::kBF16);
  Tensor y = empty({rows, cols}), rstd = empty({rows}), y16 = empty({rows, cols}, DType::kBF16), rstd16 = empty({rows});
  rmsnorm_forward(ctx, x, w, y, rstd, 1e-5f);
  rmsnorm_forward(ctx, x16, w16, y16, rstd16, 1e-5f);
  expect_rounded_once(ctx, y16, y, "rmsnorm y");
  EXPECT_EQ(rstd16.to_floats(), rstd.to_floats());
  Tensor dx = empty({rows, cols}), dx16 = empty({rows, cols}, DType::kBF16);
  rmsnorm_backward_input(ctx, dy, x, w, rstd, dx);
  rmsnorm_backward_input(ctx, dy16, x16, w16, rstd, dx16);
  expect_rounded_once(ctx, dx16, dx, "rmsnorm dx");
  Tensor dw = f32(random_floats(cols, 4), {cols}), dw16 = f32(dw.to_floats(), {cols});
  rmsnorm_backward_weight(ctx, dy, x, rstd, dw);
  rmsnorm_backward_weight(ctx, dy16, x16, rstd, dw16);
  EXPECT_EQ(dw16.to_floats(), dw.to_floats());
}

TEST(OpsLlamaBf16, SwigluWidensAtTheEdges) {
  const Context ctx;
  const std::int64_t n = 37;
  const Tensor g = rounded(ctx, random_floats(n, 5, 3.0f), {n}), u = rounded(ctx, random_floats(n, 6), {n}),
               dh = rounded(ctx, random_floats(n, 7), {n});
  Tensor h = empty({n}), h16 = empty({n}, DType::kBF16);
  swiglu_forward(ctx, g, u, h);
  swiglu_forward(ctx, cast(ctx, g, DType::kBF16), cast(ctx, u, DType::kBF16), h16);
  expect_rounded_once(ctx, h16, h, "swiglu h");
  Tensor dg = empty({n}), du = empty({n}), dg16 = empty({n}, DType::kBF16), du16 = empty({n}, DType::kBF16);
  swiglu_backward(ctx, g, u, dh, dg, du);
  swiglu_backward(ctx, cast(ctx, g, DType::kBF16), cast(ctx, u, DType::kBF16), cast(ctx, dh, DType::kBF16), dg16, du16);
  expect_rounded_once(ctx, dg16, dg, "swiglu dgate");
  expect_rounded_once(ctx, du16, du, "swiglu dup");
}

TEST(OpsLlamaBf16, RopePackWidensAtTheEdges) {
  const Context ctx;
  const std::int64_t b = 2, t = 3, hq = 6, hkv = 2, hd = 6;
  const RopeParams p{.q_heads = hq, .kv_heads = hkv, .theta = 10000.0f, .position_offset = 5};
  const Tensor q = rounded(ctx, random_floats(b * t * hq * hd, 8), {b, t, hq * hd});
  const Tensor k = rounded(ctx, random_floats(b * t * hkv * hd, 9), {b, t, hkv * hd});
  const Tensor v = rounded(ctx, random_floats(b * t * hkv * hd, 10), {b, t, hkv * hd});
  Tensor qkv = empty({b, t, 3 * hq * hd}), qkv16 = empty({b, t, 3 * hq * hd}, DType::kBF16);
  rope_pack_qkv(ctx, q, k, v, qkv, p);
  rope_pack_qkv(ctx, cast(ctx, q, DType::kBF16), cast(ctx, k, DType::kBF16), cast(ctx, v, DType::kBF16), qkv16, p);
  expect_rounded_once(ctx, qkv16, qkv, "rope qkv");
  const Tensor dqkv = rounded(ctx, random_floats(b * t * 3 * hq * hd, 11), {b, t, 3 * hq * hd});
  Tensor dq = empty(q.shape()), dk = empty(k.shape()), dv = empty(v.shape());
  Tensor dq16 = empty(q.shape(), DType::kBF16), dk16 = empty(k.shape(), DType::kBF16), dv16 = empty(v.shape(), DType::kBF16);
  rope_pack_qkv_backward(ctx, dqkv, dq, dk, dv, p);
  rope_pack_qkv_backward(ctx, cast(ctx, dqkv, DType::kBF16), dq16, dk16, dv16, p);
  expect_rounded_once(ctx, dq16, dq, "rope dq");
  expect_rounded_once(ctx, dk16, dk, "rope dk");
  expect_rounded_once(ctx, dv16, dv, "rope dv");
}

TEST(OpsLlama, RopeRefusesKvHeadsThatDoNotDivide) {
  const Context ctx;
  const Tensor q = empty({1, 2, 24}), k = empty({1, 2, 16}), v = empty({1, 2, 16}), qkv = empty({1, 2, 72});
  test::expect_error([&] { rope_pack_qkv(ctx, q, k, v, qkv, {.q_heads = 3, .kv_heads = 2}); },
                     "2 key/value heads must divide 3 query heads");
}

}  // namespace
}  // namespace cleave::ops::llama_ops_test
