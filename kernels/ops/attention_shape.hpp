// The attention kernels' shape (kernels/cpu/flash_attention.hpp, kernels/cuda/flash_attention.hpp: the same
// fields, one struct per device) filled from the seam's AttentionProblem, once for both backends.
#pragma once

#include "kernels/ops/backend.hpp"

namespace cleave::ops {

template <class FlashShape>
FlashShape flash_shape_of(const AttentionProblem& p) {
  FlashShape s;
  s.batch = p.batch;
  s.q_len = p.q_len;
  s.kv_len = p.kv_len;
  s.q_heads = p.params.q_heads;
  s.kv_heads = p.params.kv_heads;
  s.head_dim = p.head_dim;
  s.ld_q = p.q.ld;
  s.ld_k = p.k.ld;
  s.ld_v = p.v.ld;
  s.ld_o = p.out.ld;
  s.q_offset = p.params.q_offset;
  s.k_offset = p.params.k_offset;
  s.window = p.params.window;
  s.causal = p.params.causal;
  s.scale = p.params.scale;
  return s;
}

}  // namespace cleave::ops
