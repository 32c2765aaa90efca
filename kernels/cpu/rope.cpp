// RoPE + packing (grouped or repeated key/value heads), forward and backward. See rope.hpp. Parallel over
// (batch, position) rows; cos and sin come from a [T, hd/2] table built once per call (f32 angles, f32 cos/sin).
#include "kernels/cpu/rope.hpp"

#include <cmath>
#include <vector>

#include "engine/core/error.hpp"
#include "kernels/cpu/parallel.hpp"

namespace cleave::kernels::cpu {
namespace {

void check_shape(const RopeShape& s, const char* op) {
  CLEAVE_ASSERT(s.batch >= 0 && s.seq >= 0 && s.q_heads > 0 && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 &&
                    s.head_dim > 0 && s.head_dim % 2 == 0 && s.position_offset >= 0 && s.theta > 0.0f,
                "{}: bad shape B {} T {} Hq {} Hkv {} hd {} offset {} theta {}", op, s.batch, s.seq, s.q_heads,
                s.kv_heads, s.head_dim, s.position_offset, s.theta);
  CLEAVE_ASSERT(s.packed_kv_heads == 0 || s.packed_kv_heads == s.kv_heads || s.packed_kv_heads == s.q_heads,
                "{}: packed kv heads {} must be Hkv {} or Hq {}", op, s.packed_kv_heads, s.kv_heads, s.q_heads);
}

struct Table {
  std::vector<float> cos, sin;  // [T, hd/2]
};

Table make_table(const RopeShape& s) {
  const int64_t half = s.head_dim / 2;
  Table tab;
  tab.cos.resize(static_cast<size_t>(s.seq * half));
  tab.sin.resize(tab.cos.size());
  for (int64_t t = 0; t < s.seq; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = rope_angle(t, i, s);
      tab.cos[t * half + i] = std::cos(a);
      tab.sin[t * half + i] = std::sin(a);
    }
  }
  return tab;
}

// out = rotate(x) for one head at one position.
inline void rotate(const float* x, float* out, const float* c, const float* sn, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    out[i] = a * c[i] - b * sn[i];
    out[i + half] = b * c[i] + a * sn[i];
  }
}

// out = rotate^T(x): the rotation by -angle.
inline void unrotate(const float* x, float* out, const float* c, const float* sn, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    out[i] = a * c[i] + b * sn[i];
    out[i + half] = b * c[i] - a * sn[i];
  }
}

// P (packed key/value heads): the shape's, or Hq (the repeated layout) when unset.
int64_t packed_heads(const RopeShape& s) { return s.packed_kv_heads > 0 ? s.packed_kv_heads : s.q_heads; }

}  // namespace

float rope_inv_freq(int64_t i, int64_t head_dim, float theta) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
  return 1.0f / std::pow(theta, exponent);
}

float rope_angle(int64_t t, int64_t i, const RopeShape& s) {
  return static_cast<float>(s.position_offset + t) * rope_inv_freq(i, s.head_dim, s.theta);
}

void rope_pack_qkv(const float* q, const float* k, const float* v, float* qkv, const RopeShape& s) {
  check_shape(s, "rope_pack_qkv");
  const Table tab = make_table(s);
  const int64_t hd = s.head_dim, half = hd / 2, P = packed_heads(s), r_copies = P / s.kv_heads;
  const int64_t cq = s.q_heads * hd, ckv = s.kv_heads * hd, cp = P * hd, width = cq + 2 * cp;
  const int64_t rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * width))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % s.seq;
    const float* c = tab.cos.data() + t * half;
    const float* sn = tab.sin.data() + t * half;
    const float* qr = q + r * cq;
    const float* kr = k + r * ckv;
    const float* vr = v + r * ckv;
    float* out = qkv + r * width;
    for (int64_t h = 0; h < s.q_heads; ++h) rotate(qr + h * hd, out + h * hd, c, sn, half);
    for (int64_t j = 0; j < P; ++j) {
      const int64_t kvh = j / r_copies;
      rotate(kr + kvh * hd, out + cq + j * hd, c, sn, half);
      for (int64_t x = 0; x < hd; ++x) out[cq + cp + j * hd + x] = vr[kvh * hd + x];
    }
  }
}

void rope_pack_qkv_backward(const float* dqkv, float* dq, float* dk, float* dv, const RopeShape& s) {
  check_shape(s, "rope_pack_qkv_backward");
  const Table tab = make_table(s);
  const int64_t hd = s.head_dim, half = hd / 2, P = packed_heads(s), r_copies = P / s.kv_heads;
  const int64_t cq = s.q_heads * hd, ckv = s.kv_heads * hd, cp = P * hd, width = cq + 2 * cp;
  const int64_t rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * width))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % s.seq;
    const float* c = tab.cos.data() + t * half;
    const float* sn = tab.sin.data() + t * half;
    const float* in = dqkv + r * width;
    float* dqr = dq + r * cq;
    float* dkr = dk + r * ckv;
    float* dvr = dv + r * ckv;
    for (int64_t h = 0; h < s.q_heads; ++h) unrotate(in + h * hd, dqr + h * hd, c, sn, half);
    for (int64_t kvh = 0; kvh < s.kv_heads; ++kvh) {
      float* dkh = dkr + kvh * hd;
      for (int64_t x = 0; x < hd; ++x) {
        float ks = in[cq + kvh * r_copies * hd + x], vs = in[cq + cp + kvh * r_copies * hd + x];
        for (int64_t j = kvh * r_copies + 1; j < (kvh + 1) * r_copies; ++j) {  // the copies, in head order
          ks += in[cq + j * hd + x];
          vs += in[cq + cp + j * hd + x];
        }
        dkh[x] = ks;
        dvr[kvh * hd + x] = vs;
      }
      unrotate(dkh, dkh, c, sn, half);  // in place: each pair is read before it is written
    }
  }
}

}  // namespace cleave::kernels::cpu
