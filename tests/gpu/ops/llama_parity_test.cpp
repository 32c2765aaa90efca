// Seam parity of the Llama pieces (ops::rmsnorm_*, swiglu_*, rope_pack_qkv and its backward) on cuda:0 against
// the CPU backend, f32 and bf16, on awkward shapes: rows not a multiple of the 8 rows a block normalises, 1 to
// 4097 columns, enough rows for several reduction chunks; head_dim 6, 6 query heads over 2 key/value heads,
// Hkv = Hq and Hkv = 1, position_offset > 0 and Llama 3's theta. RoPE is also checked without the CPU: its
// backward must be the adjoint of its forward (<rope(q, k, v), dqkv> = <q, dq> + <k, dk> + <v, dv>, in double),
// so a wrong rotation sign or a head summed into the wrong group fails even where both backends agree.
//
// Tolerances (relative to each element plus the tensor's scale, parity_util.hpp):
//  - rmsnorm f32 2e-5: the row's sum of squares and the backward's row dot product in another order (warp
//    butterflies vs the CPU's loop), a few f32 ulps, amplified once by rstd. rstd and dweight are f32 in both
//    dtypes: rstd 2e-5; dweight sums up to 9000 rows in fixed chunks against the CPU's order: 1e-4.
//  - swiglu f32 1e-5: CUDA's expf is within 2 ulp of the CPU's exp, and nvcc may contract products into FMAs.
//  - rope f32 5e-5: inv_freq is the correctly rounded f32 on both sides (a 1-ulp difference of the powers
//    would move the angle by position * 2^-24 relative: 6e-6 at position 100), CUDA's sincosf is within 2 ulp,
//    and the backward adds the g query heads of a key/value head in head order on both sides.
//  - bf16 outputs 8e-3: those f32 ulps may flip the final bf16 rounding (one bf16 ulp, 2^-8 relative).
#include <vector>

#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing::llama_parity_test {
namespace {

double tolerance(DType dtype, double f32_tol) { return dtype == DType::kBF16 ? 8e-3 : f32_tol; }

using LlamaParity = OpsParity;

TEST_F(LlamaParity, RmsNormForwardAndBackwardMatchCpu) {
  constexpr float kEps = 1e-6f;
  const Shape shapes[] = {Shape{3, 1},  Shape{1, 4},    Shape{7, 33},  Shape{2, 5, 129},
                          Shape{301, 768}, Shape{9, 4097}, Shape{9000, 3}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Shape& shape : shapes) {
      const std::string what = shape.str() + " " + std::string(dtype_name(dtype));
      const double tol = tolerance(dtype, 2e-5);
      const std::int64_t rows = shape.rows(), cols = shape.last();
      const Tensor x = random(shape, dtype, -3.0f, 3.0f);
      const Tensor weight = random(Shape{cols}, dtype, 0.5f, 1.5f);
      Tensor y = empty_cpu(shape, dtype), rstd = empty_cpu(Shape{rows}, DType::kF32);
      ops::rmsnorm_forward(cpu(), x, weight, y, rstd, kEps);
      Tensor gpu_y = poisoned_gpu(shape, dtype), gpu_rstd = poisoned_gpu(Shape{rows}, DType::kF32);
      const Tensor gpu_x = to_gpu(x), gpu_weight = to_gpu(weight);
      ops::rmsnorm_forward(gpu(), gpu_x, gpu_weight, gpu_y, gpu_rstd, kEps);
      expect_close(y, gpu_y, tol, "rmsnorm_forward y " + what);
      expect_close(rstd, gpu_rstd, 2e-5, "rmsnorm_forward rstd " + what);

      // Backward from the CPU's rstd on both sides.
      const Tensor dy = random(shape, dtype);
      const Tensor gpu_dy = to_gpu(dy), gpu_rstd_ref = to_gpu(rstd);
      if (cols > 1) {  // one column: dx = dy w r eps / (x^2 + eps), a cancellation no tolerance describes
        Tensor dx = empty_cpu(shape, dtype);
        ops::rmsnorm_backward_input(cpu(), dy, x, weight, rstd, dx);
        Tensor gpu_dx = poisoned_gpu(shape, dtype);
        ops::rmsnorm_backward_input(gpu(), gpu_dy, gpu_x, gpu_weight, gpu_rstd_ref, gpu_dx);
        expect_close(dx, gpu_dx, tol, "rmsnorm_backward_input " + what);
      }
      Tensor dweight = random(Shape{cols}, DType::kF32);  // accumulated into: a non-zero start
      Tensor gpu_dweight = to_gpu(dweight);
      ops::rmsnorm_backward_weight(cpu(), dy, x, rstd, dweight);
      ops::rmsnorm_backward_weight(gpu(), gpu_dy, gpu_x, gpu_rstd_ref, gpu_dweight);
      expect_close(dweight, gpu_dweight, 1e-4, "rmsnorm_backward_weight " + what);
    }
  }
}

TEST_F(LlamaParity, RmsNormMixedDtypes) {  // each tensor is read and written in its own dtype
  const Shape shape{5, 37};
  const Tensor x = random(shape, DType::kBF16, -2.0f, 2.0f), weight = random(Shape{37}, DType::kF32, 0.5f, 1.5f);
  Tensor y = empty_cpu(shape, DType::kF32), rstd = empty_cpu(Shape{5}, DType::kF32);
  ops::rmsnorm_forward(cpu(), x, weight, y, rstd, 1e-5f);
  Tensor gpu_y = poisoned_gpu(shape, DType::kF32), gpu_rstd = poisoned_gpu(Shape{5}, DType::kF32);
  ops::rmsnorm_forward(gpu(), to_gpu(x), to_gpu(weight), gpu_y, gpu_rstd, 1e-5f);
  expect_close(y, gpu_y, 2e-5, "rmsnorm_forward bf16 x, f32 weight -> f32 y");
}

TEST_F(LlamaParity, SwiGluForwardAndBackwardMatchCpu) {
  const Shape shapes[] = {Shape{1, 1}, Shape{7, 33}, Shape{3, 5, 129}, Shape{2, 4097}, Shape{300, 17}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Shape& shape : shapes) {
      const std::string what = shape.str() + " " + std::string(dtype_name(dtype));
      const double tol = tolerance(dtype, 1e-5);
      const Tensor gate = random(shape, dtype, -6.0f, 6.0f), up = random(shape, dtype, -2.0f, 2.0f);
      const Tensor gpu_gate = to_gpu(gate), gpu_up = to_gpu(up);
      Tensor h = empty_cpu(shape, dtype);
      ops::swiglu_forward(cpu(), gate, up, h);
      Tensor gpu_h = poisoned_gpu(shape, dtype);
      ops::swiglu_forward(gpu(), gpu_gate, gpu_up, gpu_h);
      expect_close(h, gpu_h, tol, "swiglu_forward " + what);

      const Tensor dh = random(shape, dtype);
      Tensor dgate = empty_cpu(shape, dtype), dup = empty_cpu(shape, dtype);
      ops::swiglu_backward(cpu(), gate, up, dh, dgate, dup);
      Tensor gpu_dgate = poisoned_gpu(shape, dtype), gpu_dup = poisoned_gpu(shape, dtype);
      ops::swiglu_backward(gpu(), gpu_gate, gpu_up, to_gpu(dh), gpu_dgate, gpu_dup);
      expect_close(dgate, gpu_dgate, tol, "swiglu_backward dgate " + what);
      expect_close(dup, gpu_dup, tol, "swiglu_backward dup " + what);
    }
  }
}

struct RopeCase {
  std::int64_t batch, seq, q_heads, kv_heads, head_dim, position_offset;
  float theta;
};

std::string name(const RopeCase& c, DType dtype) {
  return "rope B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " Hq=" + std::to_string(c.q_heads) +
         " Hkv=" + std::to_string(c.kv_heads) + " hd=" + std::to_string(c.head_dim) +
         " offset=" + std::to_string(c.position_offset) + " theta=" + std::to_string(c.theta) + " " +
         std::string(dtype_name(dtype));
}

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  double sum = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) sum += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  return sum;
}

TEST_F(LlamaParity, RopePackQkvForwardAndBackwardMatchCpu) {
  const RopeCase cases[] = {
      {2, 5, 6, 2, 6, 7, 10000.0f},    // hd = 6 (3 pairs), g = 3
      {1, 9, 4, 4, 8, 0, 10000.0f},    // Hkv = Hq (no grouping), position 0 included
      {2, 3, 6, 1, 4, 100, 10000.0f},  // one key/value head for all, a later chunk of the sequence
      {1, 17, 8, 2, 64, 3, 500000.0f}, // Llama 3's head_dim and theta
  };
  for (const bool repeat : {true, false}) {  // kv heads repeated per query head, or packed once (grouped)
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (const RopeCase& c : cases) {
        const std::string what = name(c, dtype) + (repeat ? " repeated" : " grouped");
        const double tol = tolerance(dtype, 5e-5);
        const ops::RopeParams params{c.q_heads, c.kv_heads, c.theta, c.position_offset, repeat};
        const Shape q_shape{c.batch, c.seq, c.q_heads * c.head_dim};
        const Shape kv_shape{c.batch, c.seq, c.kv_heads * c.head_dim};
        const Shape qkv_shape{c.batch, c.seq, (c.q_heads + 2 * params.packed_kv_heads()) * c.head_dim};
        const Tensor q = random(q_shape, dtype), k = random(kv_shape, dtype), v = random(kv_shape, dtype);
        Tensor qkv = empty_cpu(qkv_shape, dtype);
        ops::rope_pack_qkv(cpu(), q, k, v, qkv, params);
        Tensor gpu_qkv = poisoned_gpu(qkv_shape, dtype);
        ops::rope_pack_qkv(gpu(), to_gpu(q), to_gpu(k), to_gpu(v), gpu_qkv, params);
        expect_close(qkv, gpu_qkv, tol, "rope_pack_qkv " + what);

        const Tensor dqkv = random(qkv_shape, dtype);
        Tensor dq = empty_cpu(q_shape, dtype), dk = empty_cpu(kv_shape, dtype), dv = empty_cpu(kv_shape, dtype);
        ops::rope_pack_qkv_backward(cpu(), dqkv, dq, dk, dv, params);
        Tensor gpu_dq = poisoned_gpu(q_shape, dtype), gpu_dk = poisoned_gpu(kv_shape, dtype);
        Tensor gpu_dv = poisoned_gpu(kv_shape, dtype);
        ops::rope_pack_qkv_backward(gpu(), to_gpu(dqkv), gpu_dq, gpu_dk, gpu_dv, params);
        expect_close(dq, gpu_dq, tol, "rope_pack_qkv_backward dq " + what);
        expect_close(dk, gpu_dk, tol, "rope_pack_qkv_backward dk " + what);
        expect_close(dv, gpu_dv, tol, "rope_pack_qkv_backward dv " + what);

        if (dtype == DType::kF32) {  // the adjoint identity on the GPU's own results (f32 roundings only)
          const double lhs = dot(to_cpu(gpu_qkv), dqkv);
          const double rhs = dot(q, to_cpu(gpu_dq)) + dot(k, to_cpu(gpu_dk)) + dot(v, to_cpu(gpu_dv));
          EXPECT_NEAR(lhs, rhs, 1e-4 * (std::fabs(lhs) + 1.0))
              << "rope backward is not the adjoint of forward, " << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace cleave::testing::llama_parity_test
