// Checked entry points for the RoPE + packing kernels (rope.hpp); the kernels are in rope.cu.
#include "kernels/cuda/rope.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace cleave::kernels::cuda {
namespace {

void check_shape(const char* op, const RopeShape& s) {
  CLEAVE_ASSERT(s.batch >= 0 && s.seq >= 0 && s.q_heads > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 &&
                    s.head_dim > 0 && s.head_dim % 2 == 0 && s.theta > 0.0f && s.position_offset >= 0,
                "cuda {}: bad shape [{}, {}], {} query / {} key-value heads of {}, theta {}, offset {}", op, s.batch,
                s.seq, s.q_heads, s.kv_heads, s.head_dim, s.theta, s.position_offset);
  CLEAVE_ASSERT(s.packed_kv_heads == 0 || s.packed_kv_heads == s.kv_heads || s.packed_kv_heads == s.q_heads,
                "cuda {}: packed key-value heads {} must be Hkv {} or Hq {}", op, s.packed_kv_heads, s.kv_heads,
                s.q_heads);
}

}  // namespace

void rope_pack_qkv(ConstFloats q, ConstFloats k, ConstFloats v, Floats qkv, const RopeShape& shape,
                   cudaStream_t stream) {
  check_shape("rope_pack_qkv", shape);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_rope_pack_qkv(q, k, v, qkv, shape, stream), "rope_pack_qkv_kernel");
}

void rope_pack_qkv_backward(ConstFloats dqkv, Floats dq, Floats dk, Floats dv, const RopeShape& shape,
                            cudaStream_t stream) {
  check_shape("rope_pack_qkv_backward", shape);
  CLEAVE_CUDA_CHECK_LAUNCH(detail::launch_rope_pack_qkv_backward(dqkv, dq, dk, dv, shape, stream),
                           "rope_pack_qkv_backward_kernel");
}

}  // namespace cleave::kernels::cuda
