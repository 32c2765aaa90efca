// The Llama ops of the seam (ops.hpp "Llama pieces"): argument checks once for every backend, then the slot.
#include "kernels/ops/backend.hpp"
#include "kernels/ops/dispatch.hpp"

namespace cleave::ops {

using detail::check_dtype;
using detail::check_float;
using detail::check_numel;
using detail::check_same_numel;
using detail::slot_of;

void rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                     float eps) {
  constexpr std::string_view op = "rmsnorm_forward";
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "weight", weight);
  check_float(ctx, op, "y", y);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "x", x, "y", y);
  check_numel(op, "weight", weight, x.shape().last());
  check_numel(op, "rstd", rstd, x.shape().rows());
  CLEAVE_CHECK(eps > 0.0f, "{}: eps must be > 0, got {}", op, eps);
  slot_of(ctx, &Backend::rmsnorm_forward, op)(ctx, x, weight, y, rstd, eps);
}

void rmsnorm_backward_input(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const Tensor& rstd, const Tensor& dx) {
  constexpr std::string_view op = "rmsnorm_backward_input";
  check_float(ctx, op, "dy", dy);
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "weight", weight);
  check_float(ctx, op, "dx", dx);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "dy", dy, "x", x);
  check_same_numel(op, "dx", dx, "x", x);
  check_numel(op, "weight", weight, x.shape().last());
  check_numel(op, "rstd", rstd, x.shape().rows());
  slot_of(ctx, &Backend::rmsnorm_backward_input, op)(ctx, dy, x, weight, rstd, dx);
}

void rmsnorm_backward_weight(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                             const Tensor& dweight) {
  constexpr std::string_view op = "rmsnorm_backward_weight";
  check_float(ctx, op, "dy", dy);
  check_float(ctx, op, "x", x);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_dtype(ctx, op, "dweight", dweight, DType::kF32);
  check_same_numel(op, "dy", dy, "x", x);
  check_numel(op, "dweight", dweight, x.shape().last());
  check_numel(op, "rstd", rstd, x.shape().rows());
  slot_of(ctx, &Backend::rmsnorm_backward_weight, op)(ctx, dy, x, rstd, dweight);
}

void add_rmsnorm_forward(const Context& ctx, const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& r,
                         const Tensor& out, const Tensor& rstd, float eps) {
  constexpr std::string_view op = "add_rmsnorm_forward";
  check_float(ctx, op, "x", x);
  check_float(ctx, op, "y", y);
  check_float(ctx, op, "weight", weight);
  check_float(ctx, op, "r", r);
  check_float(ctx, op, "out", out);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "x", x, "y", y);
  check_same_numel(op, "x", x, "r", r);
  check_same_numel(op, "x", x, "out", out);
  check_numel(op, "weight", weight, x.shape().last());
  check_numel(op, "rstd", rstd, x.shape().rows());
  CLEAVE_CHECK(eps > 0.0f, "{}: eps must be > 0, got {}", op, eps);
  CLEAVE_CHECK(out.raw_data() != r.raw_data() && out.raw_data() != x.raw_data() && out.raw_data() != y.raw_data(),
               "{}: out must not alias x, y or r (r is kept as the residual stream)", op);
  slot_of(ctx, &Backend::add_rmsnorm_forward, op)(ctx, x, y, weight, r, out, rstd, eps);
}

void add_rmsnorm_backward_input(const Context& ctx, const Tensor& dout, const Tensor& dresidual, const Tensor& r,
                                const Tensor& weight, const Tensor& rstd, const Tensor& dr) {
  constexpr std::string_view op = "add_rmsnorm_backward_input";
  check_float(ctx, op, "dout", dout);
  check_float(ctx, op, "dresidual", dresidual);
  check_float(ctx, op, "r", r);
  check_float(ctx, op, "weight", weight);
  check_float(ctx, op, "dr", dr);
  check_dtype(ctx, op, "rstd", rstd, DType::kF32);
  check_same_numel(op, "dout", dout, "r", r);
  check_same_numel(op, "dresidual", dresidual, "r", r);
  check_same_numel(op, "dr", dr, "r", r);
  check_numel(op, "weight", weight, r.shape().last());
  check_numel(op, "rstd", rstd, r.shape().rows());
  CLEAVE_CHECK(dr.raw_data() != dout.raw_data() && dr.raw_data() != r.raw_data(),
               "{}: dr may alias dresidual, never dout or r", op);
  slot_of(ctx, &Backend::add_rmsnorm_backward_input, op)(ctx, dout, dresidual, r, weight, rstd, dr);
}

void swiglu_forward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& h) {
  constexpr std::string_view op = "swiglu_forward";
  check_float(ctx, op, "gate", gate);
  check_float(ctx, op, "up", up);
  check_float(ctx, op, "h", h);
  check_same_numel(op, "gate", gate, "up", up);
  check_same_numel(op, "gate", gate, "h", h);
  slot_of(ctx, &Backend::swiglu_forward, op)(ctx, gate, up, h);
}

void swiglu_backward(const Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                     const Tensor& dup) {
  constexpr std::string_view op = "swiglu_backward";
  check_float(ctx, op, "gate", gate);
  check_float(ctx, op, "up", up);
  check_float(ctx, op, "dh", dh);
  check_float(ctx, op, "dgate", dgate);
  check_float(ctx, op, "dup", dup);
  check_same_numel(op, "gate", gate, "up", up);
  check_same_numel(op, "gate", gate, "dh", dh);
  check_same_numel(op, "gate", gate, "dgate", dgate);
  check_same_numel(op, "gate", gate, "dup", dup);
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
  check_float(ctx, op, "q", q);
  check_float(ctx, op, "k", k);
  check_float(ctx, op, "v", v);
  check_float(ctx, op, "qkv", qkv);
  check_rope_shapes(op, q, k, v, qkv, params);
  slot_of(ctx, &Backend::rope_pack_qkv, op)(ctx, q, k, v, qkv, params);
}

void rope_pack_qkv_backward(const Context& ctx, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const RopeParams& params) {
  constexpr std::string_view op = "rope_pack_qkv_backward";
  check_float(ctx, op, "dqkv", dqkv);
  check_float(ctx, op, "dq", dq);
  check_float(ctx, op, "dk", dk);
  check_float(ctx, op, "dv", dv);
  check_rope_shapes(op, dq, dk, dv, dqkv, params);
  slot_of(ctx, &Backend::rope_pack_qkv_backward, op)(ctx, dqkv, dq, dk, dv, params);
}

}  // namespace cleave::ops
