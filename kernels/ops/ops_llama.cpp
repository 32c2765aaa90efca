// The Llama ops of the seam (ops.hpp "Llama pieces"): argument checks once for every backend, then the slot.
#include "kernels/ops/backend.hpp"
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using detail::check_dtype;
using detail::check_floats;
using detail::check_numel;
using detail::check_same_numel;
using detail::check_same_numels;
using detail::slot_of;

namespace {
// A norm's per-column tensor (the weight or its gradient) and its per-row f32 statistics, over the rows of `x`.
void check_norm_sizes(std::string_view op, const Tensor& x, detail::Named per_column, const Tensor& rstd) {
  check_numel(op, per_column.name, per_column.tensor, x.shape().last());
  check_numel(op, "rstd", rstd, x.shape().rows());
}
}  // namespace

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  constexpr std::string_view op = "rmsnorm_forward";
  check_floats(ctx, op, {{"x", x}, {"weight", weight}, {"y", y}});
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "x", x, "y", y);
  check_norm_sizes(op, x, {"weight", weight}, rstd);
  CLEAVE_CHECK(eps > 0.0f, "{}: eps must be > 0, got {}", op, eps);
  slot_of(ctx, &Backend::rmsnorm_forward, op)(ctx, x, weight, y, rstd, eps);
}

void rmsnorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx) {
  constexpr std::string_view op = "rmsnorm_backward_input";
  check_floats(ctx, op, {{"dy", dy}, {"x", x}, {"weight", weight}, {"dx", dx}});
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "dy", dy, "x", x);
  check_same_numel(op, "dx", dx, "x", x);
  check_norm_sizes(op, x, {"weight", weight}, rstd);
  slot_of(ctx, &Backend::rmsnorm_backward_input, op)(ctx, dy, x, weight, rstd, dx);
}

void rmsnorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& dweight) {
  constexpr std::string_view op = "rmsnorm_backward_weight";
  check_floats(ctx, op, {{"dy", dy}, {"x", x}});
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_dtype(ctx, op, "dweight", dweight, DType::kF32);
  check_same_numel(op, "dy", dy, "x", x);
  check_norm_sizes(op, x, {"dweight", dweight}, rstd);
  slot_of(ctx, &Backend::rmsnorm_backward_weight, op)(ctx, dy, x, rstd, dweight);
}

void add_rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                         const Tensor& out, const Tensor& rstd, float eps) {
  constexpr std::string_view op = "add_rmsnorm_forward";
  check_floats(ctx, op, {{"x", x}, {"y", y}, {"weight", weight}, {"r", r}, {"out", out}});
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numels(op, {"x", x}, {{"y", y}, {"r", r}, {"out", out}});
  check_norm_sizes(op, x, {"weight", weight}, rstd);
  CLEAVE_CHECK(eps > 0.0f, "{}: eps must be > 0, got {}", op, eps);
  CLEAVE_CHECK(out.raw_data() != r.raw_data() && out.raw_data() != x.raw_data() && out.raw_data() != y.raw_data(),
               "{}: out must not alias x, y or r (r is kept as the residual stream)", op);
  slot_of(ctx, &Backend::add_rmsnorm_forward, op)(ctx, x, y, weight, r, out, rstd, eps);
}

void add_rmsnorm_backward_input(const Context& ctx, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                const Tensor& weight, const Tensor& rstd, const Tensor& dr) {
  constexpr std::string_view op = "add_rmsnorm_backward_input";
  check_floats(ctx, op, {{"dout", dout}, {"dresidual", dresidual}, {"r", r}, {"weight", weight}, {"dr", dr}});
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "dout", dout, "r", r);
  check_same_numel(op, "dresidual", dresidual, "r", r);
  check_same_numel(op, "dr", dr, "r", r);
  check_norm_sizes(op, r, {"weight", weight}, rstd);
  CLEAVE_CHECK(dr.raw_data() != dout.raw_data() && dr.raw_data() != r.raw_data(),
               "{}: dr may alias dresidual, never dout or r", op);
  slot_of(ctx, &Backend::add_rmsnorm_backward_input, op)(ctx, dout, dresidual, r, weight, rstd, dr);
}

void swiglu_forward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& h) {
  constexpr std::string_view op = "swiglu_forward";
  check_floats(ctx, op, {{"gate", gate}, {"up", up}, {"h", h}});
  check_same_numels(op, {"gate", gate}, {{"up", up}, {"h", h}});
  slot_of(ctx, &Backend::swiglu_forward, op)(ctx, gate, up, h);
}

void swiglu_backward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup) {
  constexpr std::string_view op = "swiglu_backward";
  check_floats(ctx, op, {{"gate", gate}, {"up", up}, {"dh", dh}, {"dgate", dgate}, {"dup", dup}});
  check_same_numels(op, {"gate", gate}, {{"up", up}, {"dh", dh}, {"dgate", dgate}, {"dup", dup}});
  slot_of(ctx, &Backend::swiglu_backward, op)(ctx, gate, up, dh, dgate, dup);
}

namespace {
// q [B, T, Hq*hd], k and v [B, T, Hkv*hd], qkv [B, T, 3*Hq*hd]; hd even, Hkv divides Hq.
void check_rope_shapes(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                       const RopeParams& p) {
  CLEAVE_CHECK(p.q_heads > 0 && p.kv_heads > 0 && p.q_heads % p.kv_heads == 0,
               "{}: {} key/value heads must divide {} query heads", op, p.kv_heads, p.q_heads);
  CLEAVE_CHECK(p.theta > 0.0f && p.position_offset >= 0, "{}: theta ({}) must be > 0 and position_offset ({}) >= 0",
               op, p.theta, p.position_offset);
  CLEAVE_CHECK(q.rank() == 3 && q.dim(2) % p.q_heads == 0 && (q.dim(2) / p.q_heads) % 2 == 0,
               "{}: q {} should be [batch, seq, {} heads x an even head dim]", op, q.shape().str(), p.q_heads);
  const std::int64_t b = q.dim(0), t = q.dim(1), hd = q.dim(2) / p.q_heads;
  check_numel(op, "k", k, b * t * p.kv_heads * hd);
  check_numel(op, "v", v, b * t * p.kv_heads * hd);
  check_numel(op, "qkv", qkv, b * t * (p.q_heads + 2 * p.packed_kv_heads()) * hd);
}
}  // namespace

void rope_pack_qkv(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                   const RopeParams& params) {
  constexpr std::string_view op = "rope_pack_qkv";
  check_floats(ctx, op, {{"q", q}, {"k", k}, {"v", v}, {"qkv", qkv}});
  check_rope_shapes(op, q, k, v, qkv, params);
  slot_of(ctx, &Backend::rope_pack_qkv, op)(ctx, q, k, v, qkv, params);
}

void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params) {
  constexpr std::string_view op = "rope_pack_qkv_backward";
  check_floats(ctx, op, {{"dqkv", dqkv}, {"dq", dq}, {"dk", dk}, {"dv", dv}});
  check_rope_shapes(op, dq, dk, dv, dqkv, params);
  slot_of(ctx, &Backend::rope_pack_qkv_backward, op)(ctx, dqkv, dq, dk, dv, params);
}

}  // namespace cleave::ops
