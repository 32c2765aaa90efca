// The Llama layers: a llama block's forward against an independent double-precision reference written from
// transformers' LlamaDecoderLayer (RMSNorm, q/k/v, rotate_half RoPE, grouped-query causal attention, o,
// SwiGLU), on grouped-query (Hq 6, Hkv 2, hd 2) and plain multi-head shapes; every parameter's and the input's
// gradient by central finite differences; the fixed parameter names and shapes; recomputation (selective,
// full) bit-identical to the plain block, also in the zero-bubble order with two micro-batches in flight. With
// model.qk_norm (Qwen3) the reference applies Qwen3Attention's per-head q_norm / k_norm before rope.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "layers/llama/llama_block.hpp"
#include "layers/llama/rmsnorm.hpp"
#include "layers/models/builder.hpp"
#include "layers/recomputed.hpp"
#include "layer_test_util.hpp"

namespace cleave::layers::llama_test {
namespace {

using testing::check_gradients;
using testing::random_tensor;
using testing::run_zero_bubble_order;
using testing::randomize;

partition::BlockSpec llama_block_spec(std::int64_t d, std::int64_t heads, std::int64_t kv_heads, std::int64_t ffn,
                                      std::int64_t seq, double theta = 10000.0, bool qk_norm = false,
                                      double norm_eps = 1e-5) {
  partition::LlamaConfig c;
  c.vocab_size = 11;
  c.d_model = d;
  c.n_layers = 1;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.ffn_hidden_size = ffn;
  c.seq_len = seq;
  c.rope_theta = theta;
  c.norm_eps = norm_eps;
  c.qk_norm = qk_norm;
  return partition::make_llama_spec(c).blocks[1];
}

ParamInit llama_init() {
  ParamInit init{cpu_allocator()};
  init.scheme = InitScheme::kGpt2;
  init.seed = 31;
  return init;
}

std::map<std::string, std::vector<double>> param_values(const Layer& layer) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& p : layer.params()) {
    const auto v = p->value.to_floats();
    out[p->name] = std::vector<double>(v.begin(), v.end());
  }
  return out;
}

// y[r, o] = sum_i x[r, i] W[o, i]
std::vector<double> matmul_t(const std::vector<double>& x, const std::vector<double>& w, std::int64_t rows,
                             std::int64_t in, std::int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (std::int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w, std::int64_t rows,
                             std::int64_t d, double eps) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (std::int64_t c = 0; c < d; ++c) sq += x[r * d + c] * x[r * d + c];
    const double rs = 1.0 / std::sqrt(sq / double(d) + eps);
    for (std::int64_t c = 0; c < d; ++c) y[r * d + c] = x[r * d + c] * rs * w[c];
  }
  return y;
}

// transformers' apply_rotary_pos_emb on one head vector at position pos (angle from f32 inv_freq and position).
void rope(double* x, std::int64_t hd, std::int64_t pos, double theta) {
  const std::int64_t half = hd / 2;
  std::vector<double> out(static_cast<size_t>(hd));
  for (std::int64_t i = 0; i < half; ++i) {
    const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(hd));
    const double a = static_cast<float>(pos) * inv_freq;
    out[i] = x[i] * std::cos(a) - x[i + half] * std::sin(a);
    out[i + half] = x[i + half] * std::cos(a) + x[i] * std::sin(a);
  }
  for (std::int64_t i = 0; i < hd; ++i) x[i] = out[i];
}

// LlamaDecoderLayer.forward in double: x [B, T, D] -> y.
std::vector<double> reference_block(const partition::BlockSpec& b, std::map<std::string, std::vector<double>> p,
                                    const std::vector<double>& x, std::int64_t batch) {
  const std::int64_t t = b.seq_len, d = b.in_features, hq = b.n_heads, hkv = b.n_kv_heads, hd = d / hq, f = b.d_ff;
  const std::int64_t rows = batch * t, g = hq / hkv;
  const std::string& n = b.name;
  const auto a = rms_norm(x, p[n + ".attn_norm.weight"], rows, d, b.norm_eps);
  auto q = matmul_t(a, p[n + ".attn.q.weight"], rows, d, hq * hd);
  auto k = matmul_t(a, p[n + ".attn.k.weight"], rows, d, hkv * hd);
  const auto v = matmul_t(a, p[n + ".attn.v.weight"], rows, d, hkv * hd);
  if (b.qk_norm) {  // Qwen3Attention: q_norm / k_norm over each head's hd columns, before rope
    q = rms_norm(q, p[n + ".attn.q_norm.weight"], rows * hq, hd, b.norm_eps);
    k = rms_norm(k, p[n + ".attn.k_norm.weight"], rows * hkv, hd, b.norm_eps);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t h = 0; h < hq; ++h) rope(&q[(r * hq + h) * hd], hd, r % t, b.rope_theta);
    for (std::int64_t h = 0; h < hkv; ++h) rope(&k[(r * hkv + h) * hd], hd, r % t, b.rope_theta);
  }
  std::vector<double> att(static_cast<size_t>(rows * hq * hd), 0.0);
  for (std::int64_t s = 0; s < batch; ++s)
    for (std::int64_t h = 0; h < hq; ++h)
      for (std::int64_t i = 0; i < t; ++i) {
        const std::int64_t kvh = h / g;
        std::vector<double> score(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < hd; ++c)
            dot += q[((s * t + i) * hq + h) * hd + c] * k[((s * t + j) * hkv + kvh) * hd + c];
          score[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, score[j]);
        }
        double z = 0;
        for (auto& e : score) z += (e = std::exp(e - mx));
        for (std::int64_t j = 0; j <= i; ++j)
          for (std::int64_t c = 0; c < hd; ++c)
            att[((s * t + i) * hq + h) * hd + c] += score[j] / z * v[((s * t + j) * hkv + kvh) * hd + c];
      }
  auto x1 = matmul_t(att, p[n + ".attn.o.weight"], rows, hq * hd, d);
  for (size_t i = 0; i < x1.size(); ++i) x1[i] += x[i];
  const auto m = rms_norm(x1, p[n + ".mlp_norm.weight"], rows, d, b.norm_eps);
  const auto gate = matmul_t(m, p[n + ".mlp.gate.weight"], rows, d, f);
  const auto up = matmul_t(m, p[n + ".mlp.up.weight"], rows, d, f);
  std::vector<double> h(gate.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  auto y = matmul_t(h, p[n + ".mlp.down.weight"], rows, f, d);
  for (size_t i = 0; i < y.size(); ++i) y[i] += x1[i];
  return y;
}

void randomize_llama(const Layer& layer) {
  std::uint64_t s = 500;
  for (auto& p : layer.params()) {
    if (p->name.ends_with("norm.weight")) randomize(*p, ++s, 1.0f, 0.3f);
    else randomize(*p, ++s, 0.0f, 0.4f);
  }
}

TEST(LlamaBlock, ForwardMatchesTheTransformersFormulasInDouble) {
  struct Case {
    std::int64_t d, hq, hkv, f, t, batch;
    double theta;
    bool qk_norm = false;
    double norm_eps = 1e-5;  // model.norm_eps: a large one changes every RMSNorm's output
  } cases[] = {{12, 6, 2, 10, 5, 2, 10000.0},
               {12, 6, 2, 10, 5, 2, 10000.0, false, 0.5},
               {12, 6, 2, 10, 5, 2, 10000.0, true, 0.25},
               {16, 2, 2, 24, 7, 1, 500000.0},
               {12, 2, 1, 8, 3, 3, 100.0},
               {12, 6, 2, 10, 5, 2, 10000.0, true},  // Qwen3's per-head q/k norms
               {16, 4, 2, 8, 4, 2, 1e6, true}};
  for (const Case& c : cases) {
    const auto spec = llama_block_spec(c.d, c.hq, c.hkv, c.f, c.t, c.theta, c.qk_norm, c.norm_eps);
    auto block = make_llama_block(spec, llama_init(), 1, 0);
    randomize_llama(*block);
    Context ctx;
    const Tensor x = random_tensor({c.batch, c.t, c.d}, 3);
    Stash stash;
    const auto y = block->forward(x, stash, ctx).to_floats();
    const auto xv = x.to_floats();
    const auto want = reference_block(spec, param_values(*block), std::vector<double>(xv.begin(), xv.end()), c.batch);
    ASSERT_EQ(y.size(), want.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      err = std::max(err, std::fabs(y[i] - want[i]));
      norm += want[i] * want[i];
    }
    EXPECT_LT(err, 2e-4) << "d " << c.d << " hq " << c.hq << " hkv " << c.hkv << " qk_norm " << c.qk_norm
                        << " norm_eps " << c.norm_eps;
    EXPECT_GT(norm, 0.0);
  }
}

TEST(LlamaBlock, ParameterNamesAndShapesAreTheFixedOnes) {
  const auto spec = llama_block_spec(12, 6, 2, 10, 5);
  auto block = make_llama_block(spec, llama_init(), 1, 0);
  std::vector<std::pair<std::string, Shape>> got;
  for (const auto& p : block->params()) {
    got.emplace_back(p->name, p->value.shape());
    EXPECT_EQ(p->weight_decay, !p->name.ends_with("norm.weight")) << p->name;
  }
  const std::vector<std::pair<std::string, Shape>> want = {
      {"blocks.0.attn_norm.weight", Shape{12}},    {"blocks.0.attn.q.weight", Shape{12, 12}},
      {"blocks.0.attn.k.weight", Shape{4, 12}},    {"blocks.0.attn.v.weight", Shape{4, 12}},
      {"blocks.0.attn.o.weight", Shape{12, 12}},   {"blocks.0.mlp_norm.weight", Shape{12}},
      {"blocks.0.mlp.gate.weight", Shape{10, 12}}, {"blocks.0.mlp.up.weight", Shape{10, 12}},
      {"blocks.0.mlp.down.weight", Shape{12, 10}}};
  EXPECT_EQ(got, want);
  // Qwen3's q/k norms: one scale per head column each, after o.
  std::vector<std::string> names;
  for (const auto& p : make_llama_block(llama_block_spec(12, 6, 2, 10, 5, 1e4, true), llama_init(), 1, 0)->params()) {
    names.push_back(p->name + " " + p->value.shape().str());
  }
  ASSERT_EQ(names.size(), want.size() + 2);
  EXPECT_EQ(names[5], "blocks.0.attn.q_norm.weight " + Shape{2}.str());
  EXPECT_EQ(names[6], "blocks.0.attn.k_norm.weight " + Shape{2}.str());
  // Norms start at 1; projections normal(0, 0.02).
  for (const auto& p : block->params()) {
    const auto v = p->value.to_floats();
    double sq = 0;
    for (float e : v) sq += double(e) * e;
    const double rms = std::sqrt(sq / double(v.size()));
    if (p->name.ends_with("norm.weight")) EXPECT_EQ(rms, 1.0) << p->name;
    else EXPECT_NEAR(rms, 0.02, 0.008) << p->name;
  }
}

TEST(LlamaBlock, GradientsMatchFiniteDifferences) {
  for (auto [hq, hkv, qk] : {std::tuple<std::int64_t, std::int64_t, bool>{6, 2, false}, {2, 2, false}, {3, 1, true}}) {
    SCOPED_TRACE(qk ? "qk_norm" : "plain");
    const auto spec = llama_block_spec(12, hq, hkv, 10, 5, 10000.0, qk);
    auto block = make_llama_block(spec, llama_init(), 1, 0);
    randomize_llama(*block);
    Context ctx;
    check_gradients(*block, random_tensor({2, 5, 12}, 13), ctx);
  }
  RmsNorm norm("final_norm", 7, 1e-5f, llama_init());
  randomize(*norm.params()[0], 3, 1.0f, 0.5f);
  Context ctx;
  check_gradients(norm, random_tensor({3, 4, 7}, 5, 2.0f), ctx);
}

TEST(LlamaBlock, RecomputationIsBitIdenticalInTheZeroBubbleOrder) {
  const auto spec = llama_block_spec(12, 6, 2, 10, 5, 10000.0, /*qk_norm=*/true);
  Context ctx;
  Tensor xa = random_tensor({2, 5, 12}, 15), xb = random_tensor({3, 5, 12}, 16);
  Tensor dya = random_tensor({2, 5, 12}, 17), dyb = random_tensor({3, 5, 12}, 18);
  auto run = [&](Layer& layer) { return run_zero_bubble_order(layer, ctx, xa, xb, dya, dyb); };
  auto plain = make_llama_block(spec, llama_init(), 1, 0);
  const auto expected = run(*plain);
  auto selective = make_llama_block(spec, llama_init(), 1, 0);
  selective->set_selective_recompute(true);
  EXPECT_EQ(run(*selective), expected) << "selective";
  RecomputedLayer full(make_llama_block(spec, llama_init(), 1, 0));
  EXPECT_EQ(run(full), expected) << "full";
  // Sequential (fused backward) order gives the same input gradients.
  auto seq = make_llama_block(spec, llama_init(), 1, 0);
  Stash s;
  seq->forward(xa, s, ctx);
  const auto dxa = seq->backward(dya, s, ctx).to_floats();
  const size_t ya = static_cast<size_t>(xa.numel() + xb.numel());
  EXPECT_EQ(dxa, std::vector<float>(expected.begin() + ya, expected.begin() + ya + dxa.size()));
}

}  // namespace
}  // namespace cleave::layers::llama_test
