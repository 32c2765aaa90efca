// Attention: checks and dispatch of the memory-efficient attention ops and the log-sum-exp merge (contracts in
// ops.hpp "Attention"). The packed and unpacked forms resolve to one AttentionProblem (backend.hpp), so a
// backend has one forward and one backward slot.
#include <cmath>
#include <initializer_list>
#include <utility>

#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using namespace detail;

namespace {

// The checks every attention form shares; fills problem's sizes and resolves the scale.
void check_attention_params(std::string_view op, const AttentionParams& p, std::int64_t head_dim) {
  CLEAVE_CHECK(p.q_heads > 0 && p.kv_heads > 0 && p.q_heads % p.kv_heads == 0,
               "{}: {} query heads do not split into groups over {} key/value heads (kv_heads must divide q_heads)",
               op, p.q_heads, p.kv_heads);
  CLEAVE_CHECK(p.causal || p.window <= 0, "{}: a sliding window ({}) needs causal attention", op, p.window);
  CLEAVE_CHECK(head_dim > 0, "{}: head dimension {} (heads {} / {})", op, head_dim, p.q_heads, p.kv_heads);
}

AttentionParams resolved(const AttentionParams& p, std::int64_t head_dim) {
  AttentionParams r = p;
  if (r.scale == 0.0f) r.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return r;
}

void check_rank3(std::string_view op, std::string_view name, const Tensor& t, std::int64_t batch, std::int64_t len,
                 std::int64_t cols) {
  CLEAVE_CHECK(t.rank() == 3 && t.dim(0) == batch && t.dim(1) == len && t.dim(2) == cols,
               "{}: {} is {}, expected [{}, {}, {}]", op, name, t.shape().str(), batch, len, cols);
}

void check_same_dtype(std::string_view op, std::initializer_list<std::pair<std::string_view, const Tensor*>> ts) {
  const auto& [first_name, first] = *ts.begin();
  for (const auto& [name, t] : ts) {
    CLEAVE_CHECK(t->dtype() == first->dtype(), "{}: {} is {} but {} is {}; attention tensors share one dtype", op,
                 name, dtype_name(t->dtype()), first_name, dtype_name(first->dtype()));
  }
}

// Unpacked problem: q [B, Tq, Hq*hd], k/v [B, Tk, Hkv*hd], out [B, Tq, Hq*hd], lse [B, Hq, Tq] f32.
AttentionProblem unpacked_problem(const Context& ctx, std::string_view op, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse, const AttentionParams& p) {
  check_float(ctx, op, "q", q);
  check_float(ctx, op, "k", k);
  check_float(ctx, op, "v", v);
  check_float(ctx, op, "out", out);
  check_dtype(ctx, op, "lse", lse, DType::kF32);
  CLEAVE_CHECK(q.rank() == 3 && k.rank() == 3, "{}: q {} and k {} should be [batch, seq, heads * head_dim]", op,
               q.shape().str(), k.shape().str());
  CLEAVE_CHECK(p.q_heads > 0 && q.dim(2) % p.q_heads == 0, "{}: q {} does not split into {} heads", op,
               q.shape().str(), p.q_heads);
  const std::int64_t hd = q.dim(2) / p.q_heads;
  check_attention_params(op, p, hd);
  const std::int64_t b = q.dim(0), tq = q.dim(1), tk = k.dim(1);
  check_rank3(op, "k", k, b, tk, p.kv_heads * hd);
  check_rank3(op, "v", v, b, tk, p.kv_heads * hd);
  check_rank3(op, "out", out, b, tq, p.q_heads * hd);
  CLEAVE_CHECK(lse.numel() == b * p.q_heads * tq, "{}: lse {} should be [{}, {}, {}] (batch, q heads, queries)", op,
               lse.shape().str(), b, p.q_heads, tq);
  check_same_dtype(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  AttentionProblem pr;
  pr.q = {q, 0, p.q_heads * hd};
  pr.k = {k, 0, p.kv_heads * hd};
  pr.v = {v, 0, p.kv_heads * hd};
  pr.out = {out, 0, p.q_heads * hd};
  pr.lse = lse;
  pr.batch = b;
  pr.q_len = tq;
  pr.kv_len = tk;
  pr.head_dim = hd;
  pr.params = resolved(p, hd);
  return pr;
}

AttentionProblem packed_problem(const Context& ctx, std::string_view op, const Tensor& qkv, const Tensor& out,
                                const Tensor& lse, const AttentionParams& p) {
  check_float(ctx, op, "qkv", qkv);
  check_float(ctx, op, "out", out);
  check_dtype(ctx, op, "lse", lse, DType::kF32);
  const std::int64_t heads = p.q_heads + 2 * p.kv_heads;
  CLEAVE_CHECK(qkv.rank() == 3 && p.q_heads > 0 && p.kv_heads > 0 && qkv.dim(2) % heads == 0,
               "{}: qkv {} should be [batch, seq, (q_heads {} + 2 * kv_heads {}) * head_dim]", op, qkv.shape().str(),
               p.q_heads, p.kv_heads);
  const std::int64_t hd = qkv.dim(2) / heads, b = qkv.dim(0), t = qkv.dim(1), ld = qkv.dim(2);
  check_attention_params(op, p, hd);
  check_rank3(op, "out", out, b, t, p.q_heads * hd);
  CLEAVE_CHECK(lse.numel() == b * p.q_heads * t, "{}: lse {} should be [{}, {}, {}] (batch, q heads, queries)", op,
               lse.shape().str(), b, p.q_heads, t);
  check_same_dtype(op, {{"qkv", &qkv}, {"out", &out}});
  AttentionProblem pr;
  pr.q = {qkv, 0, ld};
  pr.k = {qkv, p.q_heads * hd, ld};
  pr.v = {qkv, (p.q_heads + p.kv_heads) * hd, ld};
  pr.out = {out, 0, p.q_heads * hd};
  pr.lse = lse;
  pr.batch = b;
  pr.q_len = t;
  pr.kv_len = t;
  pr.head_dim = hd;
  pr.params = resolved(p, hd);
  return pr;
}

}  // namespace

void attention_forward(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse, const AttentionParams& params) {
  constexpr std::string_view op = "attention_forward";
  const AttentionProblem problem = unpacked_problem(ctx, op, q, k, v, out, lse, params);
  slot_of(ctx, &Backend::attention_forward, op)(ctx, problem);
}

void attention_backward(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const AttentionParams& params) {
  constexpr std::string_view op = "attention_backward";
  AttentionProblem problem = unpacked_problem(ctx, op, q, k, v, out, lse, params);
  check_float(ctx, op, "dout", dout);
  check_float(ctx, op, "dq", dq);
  check_float(ctx, op, "dk", dk);
  check_float(ctx, op, "dv", dv);
  CLEAVE_CHECK(dout.shape() == out.shape() && dq.shape() == q.shape() && dk.shape() == k.shape() &&
                   dv.shape() == v.shape(),
               "{}: gradients dout {} dq {} dk {} dv {} must match out {} q {} k {} v {}", op, dout.shape().str(),
               dq.shape().str(), dk.shape().str(), dv.shape().str(), out.shape().str(), q.shape().str(),
               k.shape().str(), v.shape().str());
  check_same_dtype(op, {{"q", &q}, {"dout", &dout}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  problem.dout = {dout, 0, problem.out.ld};
  problem.dq = {dq, 0, problem.q.ld};
  problem.dk = {dk, 0, problem.k.ld};
  problem.dv = {dv, 0, problem.v.ld};
  slot_of(ctx, &Backend::attention_backward, op)(ctx, problem);
}

void attention_forward_packed(const Context& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const AttentionParams& params) {
  constexpr std::string_view op = "attention_forward_packed";
  const AttentionProblem problem = packed_problem(ctx, op, qkv, out, lse, params);
  slot_of(ctx, &Backend::attention_forward, op)(ctx, problem);
}

void attention_backward_packed(const Context& ctx, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                               const Tensor& dout, const Tensor& dqkv, const AttentionParams& params) {
  constexpr std::string_view op = "attention_backward_packed";
  AttentionProblem problem = packed_problem(ctx, op, qkv, out, lse, params);
  check_float(ctx, op, "dout", dout);
  check_float(ctx, op, "dqkv", dqkv);
  CLEAVE_CHECK(dout.shape() == out.shape() && dqkv.shape() == qkv.shape(),
               "{}: dout {} and dqkv {} must match out {} and qkv {}", op, dout.shape().str(), dqkv.shape().str(),
               out.shape().str(), qkv.shape().str());
  check_same_dtype(op, {{"qkv", &qkv}, {"dout", &dout}, {"dqkv", &dqkv}});
  problem.dout = {dout, 0, problem.out.ld};
  problem.dq = {dqkv, problem.q.col, problem.q.ld};
  problem.dk = {dqkv, problem.k.col, problem.k.ld};
  problem.dv = {dqkv, problem.v.col, problem.v.ld};
  slot_of(ctx, &Backend::attention_backward, op)(ctx, problem);
}

void attention_merge(const Context& ctx, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b,
                     const Tensor& lse_b, const Tensor& out, const Tensor& lse) {
  constexpr std::string_view op = "attention_merge";
  check_float(ctx, op, "out_a", out_a);
  check_float(ctx, op, "out_b", out_b);
  check_float(ctx, op, "out", out);
  check_dtype(ctx, op, "lse_a", lse_a, DType::kF32);
  check_dtype(ctx, op, "lse_b", lse_b, DType::kF32);
  check_dtype(ctx, op, "lse", lse, DType::kF32);
  CLEAVE_CHECK(out_a.rank() == 3 && lse_a.rank() == 3 && lse_a.dim(0) == out_a.dim(0) &&
                   lse_a.dim(2) == out_a.dim(1) && lse_a.dim(1) > 0 && out_a.dim(2) % lse_a.dim(1) == 0,
               "{}: out_a {} and lse_a {} should be [batch, seq, heads * head_dim] and [batch, heads, seq]", op,
               out_a.shape().str(), lse_a.shape().str());
  CLEAVE_CHECK(out_b.shape() == out_a.shape() && out.shape() == out_a.shape() && lse_b.shape() == lse_a.shape() &&
                   lse.shape() == lse_a.shape(),
               "{}: out_a {}, out_b {}, out {} and lse_a {}, lse_b {}, lse {} must match", op, out_a.shape().str(),
               out_b.shape().str(), out.shape().str(), lse_a.shape().str(), lse_b.shape().str(), lse.shape().str());
  check_same_dtype(op, {{"out_a", &out_a}, {"out_b", &out_b}, {"out", &out}});
  slot_of(ctx, &Backend::attention_merge, op)(ctx, out_a, lse_a, out_b, lse_b, out, lse);
}

}  // namespace cleave::ops
