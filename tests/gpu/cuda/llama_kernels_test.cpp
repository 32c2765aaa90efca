// The Llama kernels (kernels/cuda/rmsnorm, swiglu, rope) against double-precision references written here, so
// they are checked on a GPU without the CPU backend's twins: RMSNorm forward / backward_input (also in place
// over dy) / backward_weight accumulating into a random start through a poisoned workspace and bit-identical
// across two runs, on rows that are not a multiple of the 8 rows a block normalises, 1 to 4097 columns and
// enough rows for many reduction chunks; SwiGLU with gates from -100 to 100 (sigmoid saturating both ways);
// RoPE + grouped-query packing (hd 6, Hq 6 over Hkv 2, Hkv = Hq, position_offset > 0) forward and backward, and
// one bf16-in / f32-out RoPE call. The references take the angle as the contract defines it (f32 inv_freq and
// f32 angle, rope.hpp) and everything else in double.
//
// Tolerances (relative to each element plus the tensor's scale): f32 2e-5 (f32 sums in another order than a
// double sum, CUDA's expf / sincosf within 2 ulp); the bf16-input RoPE call compares with a reference fed the
// same bf16-rounded inputs, so its f32 output keeps 2e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/rope.hpp"
#include "kernels/cuda/swiglu.hpp"
#include "tests/gpu/cuda/cuda_test_util.hpp"

namespace cleave::testing::llama_kernels_test {
namespace {

namespace kc = kernels::cuda;
constexpr double kTol = 2e-5;

std::vector<float> as_floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

using CudaLlamaKernels = CudaTest;

TEST_F(CudaLlamaKernels, RmsNormMatchesDoubleReference) {
  constexpr float kEps = 1e-6f;
  const std::pair<int64_t, int64_t> shapes[] = {{3, 1}, {37, 5}, {301, 768}, {9, 4097}, {9000, 3}};
  for (const auto& [rows, cols] : shapes) {
    const std::string what = std::to_string(rows) + " x " + std::to_string(cols);
    const auto n = static_cast<std::size_t>(rows * cols);
    const auto x = random_floats(n, -3.0f, 3.0f), dy = random_floats(n);
    const auto w = random_floats(static_cast<std::size_t>(cols), 0.5f, 1.5f);
    const auto dw0 = random_floats(static_cast<std::size_t>(cols));
    std::vector<double> y(n), rstd(static_cast<std::size_t>(rows)), dx(n), dw(dw0.begin(), dw0.end());
    for (int64_t r = 0; r < rows; ++r) {
      double sq = 0.0, gx = 0.0;
      for (int64_t c = 0; c < cols; ++c) sq += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
      const double rs = 1.0 / std::sqrt(sq / static_cast<double>(cols) + kEps);
      rstd[r] = rs;
      for (int64_t c = 0; c < cols; ++c) {
        const std::size_t i = r * cols + c;
        y[i] = x[i] * rs * w[c];
        gx += static_cast<double>(dy[i]) * w[c] * x[i];
        dw[c] += static_cast<double>(dy[i]) * x[i] * static_cast<double>(static_cast<float>(rs));
      }
      for (int64_t c = 0; c < cols; ++c) {
        const std::size_t i = r * cols + c;
        dx[i] = rs * (static_cast<double>(dy[i]) * w[c] - x[i] * rs * rs * gx / static_cast<double>(cols));
      }
    }
    Tensor d_x = upload_f32(x), d_w = upload_f32(w), d_dy = upload_f32(dy);
    Tensor d_y = poisoned(rows * cols), d_rstd = poisoned(rows);
    kc::rmsnorm_forward(d_x.data<float>(), d_w.data<float>(), d_y.data<float>(), d_rstd.data<float>(), rows, cols,
                        kEps, stream());
    expect_close(download_f32(d_y), as_floats(y), kTol, "rmsnorm_forward y " + what);
    expect_close(download_f32(d_rstd), as_floats(rstd), kTol, "rmsnorm_forward rstd " + what);

    // Backward from the reference's rstd (rounded to f32, as the kernels take it).
    Tensor ref_rstd = upload_f32(as_floats(rstd));
    if (cols > 1) {  // one column: dx = dy w r eps / (x^2 + eps), a cancellation no f32 tolerance describes
      Tensor d_dx = poisoned(rows * cols);
      kc::rmsnorm_backward_input(d_dy.data<float>(), d_x.data<float>(), d_w.data<float>(), ref_rstd.data<float>(),
                                 d_dx.data<float>(), rows, cols, stream());
      expect_close(download_f32(d_dx), as_floats(dx), kTol, "rmsnorm_backward_input " + what);
      Tensor in_place = upload_f32(dy);  // dx over dy
      kc::rmsnorm_backward_input(in_place.data<float>(), d_x.data<float>(), d_w.data<float>(), ref_rstd.data<float>(),
                                 in_place.data<float>(), rows, cols, stream());
      expect_bitwise_equal(download_f32(in_place), download_f32(d_dx), "rmsnorm_backward_input in place " + what);
    }
    const std::size_t bytes = kc::rmsnorm_backward_weight_workspace_size(rows, cols);
    std::vector<float> runs[2];
    for (auto& run : runs) {
      Tensor ws = workspace(bytes);
      CLEAVE_CUDA_CHECK(cudaMemsetAsync(ws.raw_data(), 0xff, ws.nbytes(), stream()));  // partials are written
      Tensor d_dw = upload_f32(dw0);
      kc::rmsnorm_backward_weight(d_dy.data<float>(), d_x.data<float>(), ref_rstd.data<float>(), d_dw.data<float>(),
                                  rows, cols, ws.raw_data(), bytes, stream());
      run = download_f32(d_dw);
    }
    expect_close(runs[0], as_floats(dw), 1e-4, "rmsnorm_backward_weight " + what);  // up to 9000-row sums
    expect_bitwise_equal(runs[1], runs[0], "rmsnorm_backward_weight run to run " + what);
  }
}

TEST_F(CudaLlamaKernels, SwiGluMatchesDoubleReference) {
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{4097}}) {
    auto gate = random_floats(static_cast<std::size_t>(n), -8.0f, 8.0f);
    gate[0] = -100.0f;  // exp(100) overflows f32: sigmoid 0
    if (n > 2) gate[1] = 100.0f, gate[2] = 0.0f;
    const auto up = random_floats(static_cast<std::size_t>(n), -2.0f, 2.0f);
    const auto dh = random_floats(static_cast<std::size_t>(n));
    std::vector<double> h(gate.size()), dgate(gate.size()), dup(gate.size());
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const double g = gate[i], s = 1.0 / (1.0 + std::exp(-g));
      h[i] = g * s * up[i];
      dup[i] = static_cast<double>(dh[i]) * g * s;
      dgate[i] = static_cast<double>(dh[i]) * up[i] * s * (1.0 + g * (1.0 - s));
    }
    Tensor d_gate = upload_f32(gate), d_up = upload_f32(up), d_dh = upload_f32(dh);
    Tensor d_h = poisoned(n), d_dgate = poisoned(n), d_dup = poisoned(n);
    kc::swiglu_forward(d_gate.data<float>(), d_up.data<float>(), d_h.data<float>(), n, stream());
    kc::swiglu_backward(d_gate.data<float>(), d_up.data<float>(), d_dh.data<float>(), d_dgate.data<float>(),
                        d_dup.data<float>(), n, stream());
    const std::string what = "n=" + std::to_string(n);
    expect_close(download_f32(d_h), as_floats(h), kTol, "swiglu_forward " + what);
    expect_close(download_f32(d_dgate), as_floats(dgate), kTol, "swiglu_backward dgate " + what);
    expect_close(download_f32(d_dup), as_floats(dup), kTol, "swiglu_backward dup " + what);
  }
}

// The contract's angle: f32 inv_freq = 1 / powf(theta, f32(2i) / f32(hd)) and f32 angle = f32(position) * inv_freq
// (rope.hpp); cos and sin of that f32 angle in double.
double angle(const kc::RopeShape& s, int64_t t, int64_t i) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(s.head_dim);
  const double power = std::pow(static_cast<double>(s.theta), static_cast<double>(exponent));
  const float inv_freq = 1.0f / static_cast<float>(power);  // powf correctly rounded
  return static_cast<double>(static_cast<float>(s.position_offset + t) * inv_freq);
}

struct RopeRef {
  std::vector<double> qkv, dq, dk, dv;
};

RopeRef rope_reference(const kc::RopeShape& s, const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, const std::vector<float>& dqkv) {
  const int64_t hd = s.head_dim, half = hd / 2, g = s.q_heads / s.kv_heads;
  const int64_t cq = s.q_heads * hd, ckv = s.kv_heads * hd;
  RopeRef ref;
  ref.qkv.resize(static_cast<std::size_t>(s.batch * s.seq * 3 * cq));
  ref.dq.assign(q.size(), 0.0);
  ref.dk.assign(k.size(), 0.0);
  ref.dv.assign(v.size(), 0.0);
  for (int64_t bt = 0; bt < s.batch * s.seq; ++bt) {
    const int64_t t = bt % s.seq;
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t j = h / g;
      for (int64_t i = 0; i < half; ++i) {
        const double a = angle(s, t, i), c = std::cos(a), sn = std::sin(a);
        const int64_t qi = bt * cq + h * hd + i, ki = bt * ckv + j * hd + i, o = bt * 3 * cq + h * hd + i;
        ref.qkv[o] = q[qi] * c - q[qi + half] * sn;
        ref.qkv[o + half] = q[qi + half] * c + q[qi] * sn;
        ref.qkv[o + cq] = k[ki] * c - k[ki + half] * sn;
        ref.qkv[o + cq + half] = k[ki + half] * c + k[ki] * sn;
        ref.qkv[o + 2 * cq] = v[ki];
        ref.qkv[o + 2 * cq + half] = v[ki + half];
        // The adjoint: each output's gradient rotated back onto the input it came from.
        ref.dq[qi] = dqkv[o] * c + dqkv[o + half] * sn;
        ref.dq[qi + half] = dqkv[o + half] * c - dqkv[o] * sn;
        ref.dk[ki] += dqkv[o + cq] * c + dqkv[o + cq + half] * sn;
        ref.dk[ki + half] += dqkv[o + cq + half] * c - dqkv[o + cq] * sn;
        ref.dv[ki] += dqkv[o + 2 * cq];
        ref.dv[ki + half] += dqkv[o + 2 * cq + half];
      }
    }
  }
  return ref;
}

TEST_F(CudaLlamaKernels, RopePackQkvMatchesDoubleReference) {
  const kc::RopeShape shapes[] = {
      {2, 5, 6, 2, 6, 10000.0f, 7},    // hd 6, g 3
      {1, 9, 4, 4, 8, 10000.0f, 0},    // Hkv = Hq
      {3, 7, 8, 1, 64, 500000.0f, 40}, // one kv head, Llama 3's theta
  };
  for (const kc::RopeShape& s : shapes) {
    const std::string what = "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seq) +
                             " Hq=" + std::to_string(s.q_heads) + " Hkv=" + std::to_string(s.kv_heads) +
                             " hd=" + std::to_string(s.head_dim) + " offset=" + std::to_string(s.position_offset);
    const int64_t rows = s.batch * s.seq, cq = s.q_heads * s.head_dim, ckv = s.kv_heads * s.head_dim;
    const auto size = [](int64_t elements) { return static_cast<std::size_t>(elements); };
    const auto q = random_floats(size(rows * cq)), k = random_floats(size(rows * ckv));
    const auto v = random_floats(size(rows * ckv)), dqkv = random_floats(size(rows * 3 * cq));
    const RopeRef ref = rope_reference(s, q, k, v, dqkv);

    Tensor d_q = upload_f32(q), d_k = upload_f32(k), d_v = upload_f32(v), d_dqkv = upload_f32(dqkv);
    Tensor d_qkv = poisoned(rows * 3 * cq), d_dq = poisoned(rows * cq), d_dk = poisoned(rows * ckv),
           d_dv = poisoned(rows * ckv);
    kc::rope_pack_qkv(d_q.data<float>(), d_k.data<float>(), d_v.data<float>(), d_qkv.data<float>(), s, stream());
    kc::rope_pack_qkv_backward(d_dqkv.data<float>(), d_dq.data<float>(), d_dk.data<float>(), d_dv.data<float>(), s,
                               stream());
    expect_close(download_f32(d_qkv), as_floats(ref.qkv), kTol, "rope_pack_qkv " + what);
    expect_close(download_f32(d_dq), as_floats(ref.dq), kTol, "rope_pack_qkv_backward dq " + what);
    expect_close(download_f32(d_dk), as_floats(ref.dk), kTol, "rope_pack_qkv_backward dk " + what);
    expect_close(download_f32(d_dv), as_floats(ref.dv), kTol, "rope_pack_qkv_backward dv " + what);

    // bf16 inputs read in their own dtype, f32 output: the reference on the same rounded inputs.
    const auto qb = round_to_bf16(q), kb = round_to_bf16(k), vb = round_to_bf16(v);
    const RopeRef ref_b = rope_reference(s, qb, kb, vb, dqkv);
    Tensor b_q = upload(to_bf16_bits(q), DType::kBF16), b_k = upload(to_bf16_bits(k), DType::kBF16);
    Tensor b_v = upload(to_bf16_bits(v), DType::kBF16), b_qkv = poisoned(rows * 3 * cq);
    kc::rope_pack_qkv(kc::ConstFloats(b_q.raw_data(), kc::FloatType::kBF16),
                      kc::ConstFloats(b_k.raw_data(), kc::FloatType::kBF16),
                      kc::ConstFloats(b_v.raw_data(), kc::FloatType::kBF16), b_qkv.data<float>(), s, stream());
    expect_close(download_f32(b_qkv), as_floats(ref_b.qkv), kTol, "rope_pack_qkv bf16 -> f32 " + what);
  }
}

}  // namespace
}  // namespace cleave::testing::llama_kernels_test
