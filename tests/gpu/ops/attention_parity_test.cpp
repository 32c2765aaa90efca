// Seam parity of causal multi-head attention: ops::attention_forward / attention_backward on cuda:0 against the CPU
// backend, f32 and bf16, on sequence lengths that are not multiples of 32 (1, 17, 45, 130), 1 and 3 heads and
// batches of 1 and 2 (the CUDA slot loops over the batch; a wrong batch offset shows in entry 1).
//
// Tolerances (relative to each element plus the tensor's scale, parity_util.hpp):
//  - f32 1e-4: the same products in another summation order (cuBLASLt vs OpenBLAS, k <= 130 terms) and expf vs
//    the CPU's exp, a few f32 ulps each, grown by the backward chain (dS feeds two more GEMMs).
//  - bf16 3e-2: outputs are rounded to bf16 (2^-9 relative), and the CUDA path rounds P before O = P V and dS
//    before dQ/dK to bf16 (the GEMMs' operand type) where the CPU keeps them in f32: two more roundings of
//    2^-9 each, summed over up to 130 terms of either sign.
#include "tests/gpu/ops/parity_util.hpp"

namespace cleave::testing {
namespace {

struct AttentionCase {
  std::int64_t batch, seq, heads, head_dim;
  DType dtype;
};

std::string name(const AttentionCase& c) {
  return "attention B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " H=" + std::to_string(c.heads) +
         " hd=" + std::to_string(c.head_dim) + " " + std::string(dtype_name(c.dtype));
}

double tolerance(DType dtype) { return dtype == DType::kBF16 ? 3e-2 : 1e-4; }

const AttentionCase kCases[] = {
    {1, 1, 1, 8, DType::kF32},   {2, 17, 3, 8, DType::kF32},  {1, 45, 1, 16, DType::kF32},
    {2, 130, 3, 8, DType::kF32}, {2, 17, 3, 5, DType::kF32},  {1, 1, 1, 8, DType::kBF16},
    {2, 17, 3, 8, DType::kBF16}, {1, 45, 1, 16, DType::kBF16}, {2, 130, 3, 8, DType::kBF16},
};

class AttentionParity : public OpsParity {
 protected:
  // qkv in [-2, 2): scores of a few units, so the softmax is neither uniform nor one-hot.
  Tensor qkv_for(const AttentionCase& c) {
    return random(Shape{c.batch, c.seq, 3 * c.heads * c.head_dim}, c.dtype, -2.0f, 2.0f);
  }
};

TEST_F(AttentionParity, ForwardMatchesCpu) {
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(name(c));
    const Tensor qkv = qkv_for(c);
    const Shape out_shape{c.batch, c.seq, c.heads * c.head_dim};
    const Shape probs_shape{c.batch, c.heads, c.seq, c.seq};
    Tensor out = empty_cpu(out_shape, c.dtype), probs = empty_cpu(probs_shape, c.dtype);
    ops::attention_forward(cpu(), qkv, out, probs, c.heads);

    Tensor gpu_out = poisoned_gpu(out_shape, c.dtype), gpu_probs = poisoned_gpu(probs_shape, c.dtype);
    ops::attention_forward(gpu(), to_gpu(qkv), gpu_out, gpu_probs, c.heads);
    expect_close(out, gpu_out, tolerance(c.dtype), name(c) + " out");
    expect_close(probs, gpu_probs, tolerance(c.dtype), name(c) + " probs");

    // Above the diagonal the stash holds exact zeros (the backward relies on it).
    const std::vector<float> p = to_cpu(gpu_probs).to_floats();
    std::int64_t nonzero = 0;
    for (std::int64_t row = 0; row < c.batch * c.heads * c.seq; ++row) {
      for (std::int64_t j = row % c.seq + 1; j < c.seq; ++j) nonzero += p[row * c.seq + j] != 0.0f;
    }
    EXPECT_EQ(nonzero, 0) << name(c) << ": probabilities above the diagonal";
  }
}

TEST_F(AttentionParity, BackwardMatchesCpu) {
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(name(c));
    const Tensor qkv = qkv_for(c);
    const Shape out_shape{c.batch, c.seq, c.heads * c.head_dim};
    Tensor out = empty_cpu(out_shape, c.dtype), probs = empty_cpu(Shape{c.batch, c.heads, c.seq, c.seq}, c.dtype);
    ops::attention_forward(cpu(), qkv, out, probs, c.heads);  // both backends read the same stash
    const Tensor dout = random(out_shape, c.dtype);

    Tensor dqkv = empty_cpu(qkv.shape(), c.dtype);
    ops::attention_backward(cpu(), dout, qkv, probs, dqkv, c.heads);
    Tensor gpu_dqkv = poisoned_gpu(qkv.shape(), c.dtype);
    ops::attention_backward(gpu(), to_gpu(dout), to_gpu(qkv), to_gpu(probs), gpu_dqkv, c.heads);
    expect_close(dqkv, gpu_dqkv, tolerance(c.dtype), name(c) + " dqkv");
  }
}

TEST_F(AttentionParity, MixedDtypesAreRefusedByName) {
  const Tensor qkv = to_gpu(random(Shape{1, 3, 6}, DType::kF32));
  Tensor out = poisoned_gpu(Shape{1, 3, 2}, DType::kBF16), probs = poisoned_gpu(Shape{1, 1, 3, 3}, DType::kF32);
  try {
    ops::attention_forward(gpu(), qkv, out, probs, 1);
    FAIL() << "attention_forward accepted f32 qkv with a bf16 out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::testing
