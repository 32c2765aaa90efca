// RoPE + grouped-query packing, forward and backward. See rope.hpp. Parallel over (batch, position) rows;
// cos and sin come from a [T, hd/2] table built once per call (f32 angles, f32 cos/sin).
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
  const int64_t hd = s.head_dim, half = hd / 2, g = s.q_heads / s.kv_heads;
  const int64_t cq = s.q_heads * hd, ckv = s.kv_heads * hd;
  const int64_t rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * 3 * cq))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % s.seq;
    const float* c = tab.cos.data() + t * half;
    const float* sn = tab.sin.data() + t * half;
    const float* qr = q + r * cq;
    const float* kr = k + r * ckv;
    const float* vr = v + r * ckv;
    float* out = qkv + r * 3 * cq;
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t kvh = h / g;
      rotate(qr + h * hd, out + h * hd, c, sn, half);
      rotate(kr + kvh * hd, out + cq + h * hd, c, sn, half);
      for (int64_t j = 0; j < hd; ++j) out[2 * cq + h * hd + j] = vr[kvh * hd + j];
    }
  }
}

void rope_pack_qkv_backward(const float* dqkv, float* dq, float* dk, float* dv, const RopeShape& s) {
  check_shape(s, "rope_pack_qkv_backward");
  const Table tab = make_table(s);
  const int64_t hd = s.head_dim, half = hd / 2, g = s.q_heads / s.kv_heads;
  const int64_t cq = s.q_heads * hd, ckv = s.kv_heads * hd;
  const int64_t rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * 3 * cq))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % s.seq;
    const float* c = tab.cos.data() + t * half;
    const float* sn = tab.sin.data() + t * half;
    const float* in = dqkv + r * 3 * cq;
    float* dqr = dq + r * cq;
    float* dkr = dk + r * ckv;
    float* dvr = dv + r * ckv;
    for (int64_t h = 0; h < s.q_heads; ++h) unrotate(in + h * hd, dqr + h * hd, c, sn, half);
    for (int64_t kvh = 0; kvh < s.kv_heads; ++kvh) {
      float* dkh = dkr + kvh * hd;
      for (int64_t j = 0; j < hd; ++j) {
        float ks = 0.0f, vs = 0.0f;
        for (int64_t h = kvh * g; h < (kvh + 1) * g; ++h) {  // query heads sharing this kv head, in order
          ks += in[cq + h * hd + j];
          vs += in[2 * cq + h * hd + j];
        }
        dkh[j] = ks;
        dvr[kvh * hd + j] = vs;
      }
      unrotate(dkh, dkh, c, sn, half);  // in place: each pair is read before it is written
    }
  }
}

}  // namespace cleave::kernels::cpu
