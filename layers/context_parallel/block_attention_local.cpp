// TEMPORARY block attention with log-sum-exp (see block_attention_local.hpp): to be replaced by the op seam's
// memory-efficient attention (branch `flash`).
#include "layers/context_parallel/block_attention_local.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/error.hpp"

namespace cleave::layers::local_block_attention {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::vector<double> read(const Tensor& t) {
  CLEAVE_CHECK(t.device().is_cpu(), "ring attention: the local block attention runs on the cpu only (device {}); "
               "use parallel.context_parallel_comm all_to_all there", t.device().str());
  const std::vector<float> f = t.to_floats();
  return {f.begin(), f.end()};
}

void write(const Tensor& t, const std::vector<double>& values) {
  if (t.dtype() == DType::kF32) {
    for (std::size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = static_cast<float>(values[i]);
  } else {
    CLEAVE_ASSERT(t.dtype() == DType::kBF16, "local block attention: {} tensor", dtype_name(t.dtype()));
    auto* bits = static_cast<std::uint16_t*>(t.raw_data());
    for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(static_cast<float>(values[i]));
  }
}

struct Dims {
  std::int64_t b, tq, tk, hq, hkv, hd;
  std::int64_t qi(std::int64_t s, std::int64_t i, std::int64_t h) const { return (s * tq + i) * hq * hd + h * hd; }
  std::int64_t ki(std::int64_t s, std::int64_t j, std::int64_t h) const { return (s * tk + j) * hkv * hd + h * hd; }
  std::int64_t li(std::int64_t s, std::int64_t h, std::int64_t i) const { return (s * hq + h) * tq + i; }
};

Dims dims(const Tensor& q, const Tensor& k, const Params& p) {
  const std::int64_t hd = q.dim(2) / p.q_heads;
  CLEAVE_ASSERT(p.kv_heads > 0 && p.q_heads % p.kv_heads == 0 && k.dim(2) == p.kv_heads * hd,
                "local block attention: q {} k {} with {} / {} heads", q.shape().str(), k.shape().str(), p.q_heads,
                p.kv_heads);
  return {q.dim(0), q.dim(1), k.dim(1), p.q_heads, p.kv_heads, hd};
}

bool sees(const Params& p, std::int64_t i, std::int64_t j) { return !p.causal || p.k_offset + j <= p.q_offset + i; }

}  // namespace

void forward(const Context&, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
             const Params& p) {
  const Dims d = dims(q, k, p);
  const std::vector<double> Q = read(q), K = read(k), V = read(v);
  std::vector<double> O(static_cast<std::size_t>(out.numel()), 0.0), L(static_cast<std::size_t>(lse.numel()), kNegInf);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
  const std::int64_t group = d.hq / d.hkv;
  std::vector<double> s(static_cast<std::size_t>(d.tk));
  for (std::int64_t b = 0; b < d.b; ++b) {
    for (std::int64_t h = 0; h < d.hq; ++h) {
      for (std::int64_t i = 0; i < d.tq; ++i) {
        double m = kNegInf;
        for (std::int64_t j = 0; j < d.tk; ++j) {
          if (!sees(p, i, j)) continue;
          double dot = 0;
          for (std::int64_t c = 0; c < d.hd; ++c) dot += Q[d.qi(b, i, h) + c] * K[d.ki(b, j, h / group) + c];
          s[j] = scale * dot;
          m = std::max(m, s[j]);
        }
        if (m == kNegInf) continue;  // sees no key
        double sum = 0;
        for (std::int64_t j = 0; j < d.tk; ++j) {
          if (sees(p, i, j)) sum += std::exp(s[j] - m);
        }
        const double l = m + std::log(sum);
        L[d.li(b, h, i)] = l;
        for (std::int64_t j = 0; j < d.tk; ++j) {
          if (!sees(p, i, j)) continue;
          const double pij = std::exp(s[j] - l);
          for (std::int64_t c = 0; c < d.hd; ++c) O[d.qi(b, i, h) + c] += pij * V[d.ki(b, j, h / group) + c];
        }
      }
    }
  }
  write(out, O);
  write(lse, L);
}

void backward(const Context&, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Params& p) {
  const Dims d = dims(q, k, p);
  const std::vector<double> Q = read(q), K = read(k), V = read(v), O = read(out), L = read(lse), dO = read(dout);
  std::vector<double> dQ = p.accumulate_grads ? read(dq) : std::vector<double>(static_cast<std::size_t>(dq.numel()), 0.0);
  std::vector<double> dK = p.accumulate_grads ? read(dk) : std::vector<double>(static_cast<std::size_t>(dk.numel()), 0.0);
  std::vector<double> dV = p.accumulate_grads ? read(dv) : std::vector<double>(static_cast<std::size_t>(dv.numel()), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
  const std::int64_t group = d.hq / d.hkv;
  for (std::int64_t b = 0; b < d.b; ++b) {
    for (std::int64_t h = 0; h < d.hq; ++h) {
      const std::int64_t g = h / group;
      for (std::int64_t i = 0; i < d.tq; ++i) {
        const double l = L[d.li(b, h, i)];
        if (l == kNegInf) continue;
        double delta = 0;  // rowsum(dout * out)
        for (std::int64_t c = 0; c < d.hd; ++c) delta += dO[d.qi(b, i, h) + c] * O[d.qi(b, i, h) + c];
        for (std::int64_t j = 0; j < d.tk; ++j) {
          if (!sees(p, i, j)) continue;
          double dot = 0, dp = 0;
          for (std::int64_t c = 0; c < d.hd; ++c) {
            dot += Q[d.qi(b, i, h) + c] * K[d.ki(b, j, g) + c];
            dp += dO[d.qi(b, i, h) + c] * V[d.ki(b, j, g) + c];
          }
          const double pij = std::exp(scale * dot - l);
          const double ds = pij * (dp - delta) * scale;
          for (std::int64_t c = 0; c < d.hd; ++c) {
            dV[d.ki(b, j, g) + c] += pij * dO[d.qi(b, i, h) + c];
            dQ[d.qi(b, i, h) + c] += ds * K[d.ki(b, j, g) + c];
            dK[d.ki(b, j, g) + c] += ds * Q[d.qi(b, i, h) + c];
          }
        }
      }
    }
  }
  write(dq, dQ);
  write(dk, dK);
  write(dv, dV);
}

void merge(const Context&, const Tensor& out_a, const Tensor& lse_a, const Tensor& out_b, const Tensor& lse_b,
           const Tensor& out, const Tensor& lse) {
  const std::vector<double> A = read(out_a), La = read(lse_a), B = read(out_b), Lb = read(lse_b);
  const std::int64_t batch = lse_a.dim(0), heads = lse_a.dim(1), t = lse_a.dim(2), hd = out_a.dim(2) / heads;
  std::vector<double> O(A.size(), 0.0), L(La.size(), kNegInf);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < t; ++i) {
        const std::size_t li = static_cast<std::size_t>((b * heads + h) * t + i);
        const double la = La[li], lb = Lb[li];
        const double m = std::max(la, lb);
        if (m == kNegInf) continue;
        const double l = m + std::log(std::exp(la - m) + std::exp(lb - m));
        L[li] = l;
        const double wa = la == kNegInf ? 0.0 : std::exp(la - l), wb = lb == kNegInf ? 0.0 : std::exp(lb - l);
        for (std::int64_t c = 0; c < hd; ++c) {
          const std::size_t oi = static_cast<std::size_t>((b * t + i) * heads * hd + h * hd + c);
          O[oi] = wa * A[oi] + wb * B[oi];
        }
      }
    }
  }
  write(out, O);
  write(lse, L);
}

}  // namespace cleave::layers::local_block_attention
